"""How much the ingestion passes reduce real tool outputs, per tool and per trace set.

Every tool output above the 2,200-char gate in the shared recorded sessions (found
through the trace importers) goes through `TokenPilot().reduce_tool_output`, as a host
plugin would send it. Printed per trace set and per tool: count, median and p25 of
reduced/original chars, the share of the original's non-blank lines kept verbatim in
the reduced text (line-number prefixes ignored), the share of its distinct words (runs
of letters, digits and `_`: names, ids, numbers) still visible, which counts a JSON value
kept in a re-encoded row where a verbatim line does not, and how many grew. A second
table does the same for the outputs under the gate, which only the lossless JSON
re-encoding (`small_json`) touches. "non-code-read"
is every output except file reads by tool name (`Read`, `read_file`, ...), which stay
exact; "not a file's text" also leaves out what the passes treat as a file's text and
never fold: shell commands that print a source file (`cat x.py`, `sed -n 1,80p x.py`)
and the echo of a write or an edit (see `tokenpilot.passes.folding.is_code_read`).

Then, per content kind (`tokenpilot.passes.kinds`), the fidelity table: median size and
the share of word 4-grams kept in order (median, p10, min), with the 130 web pages of
../shared/html as the markup row (4-grams of each page's article).

With `--halves`, the "not a file's text" rows are also given per half of each trace
set's sessions (sorted by id: half A is the first half, B the rest), so a rule designed
on one half can be checked on the other. With `--timing`, the median and p95 ms each
content and layout pass takes per output (run alone on the original, as the first pass
would), and the whole `reduce_tool_output`, over the same outputs.

    .venv/bin/python benchmarks/bench_reduction.py [TRACES_DIR] [--without PASS,...] [--in-session]
        [--halves] [--timing] [--truncate-at CHARS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenpilot import Config, TokenPilot
from tokenpilot._canonical import artifact_id_for
from tokenpilot.ingest.pipeline import Pipeline
from tokenpilot.measure.bench.methods import truncating_at
from tokenpilot.measure.traces import load
from tokenpilot.passes.base import PassContext
from tokenpilot.passes.folding import is_code_read as reads_a_file
from tokenpilot.passes.truncate import tool_family
from tokenpilot.store.artifacts import ArtifactStore

GATE = 2200
READ_FAMILIES = frozenset({"read", "file_read", "read_file", "view", "cat", "notebook_read"})
_NUMBER_PREFIX = re.compile(r"^[ \t]*\d{1,9}(?:→|\t|:|\s?\|)")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True, slots=True)
class Output:
    """One recorded tool output above the gate, with where it came from."""

    trace_set: str
    session: str
    tool: str
    arguments: str
    text: str
    call_id: str = ""
    half: str = ""  # "A" or "B": which half of its trace set's sessions (sorted by id)


def default_traces_dir() -> Path:
    repo = Path(__file__).resolve().parent.parent
    shared = Path(os.environ.get("TOKENPILOT_SHARED", repo.parent / "shared"))
    if not shared.exists():
        shared = Path("/work/shared")
    return shared / "traces"


def outputs(traces: Path, gate: int = GATE, below: bool = False) -> Iterator[Output]:
    """Every string tool result longer than `gate` chars (with `below`: the non-empty ones
    up to `gate` chars instead), in file and message order."""
    for folder in sorted(p for p in traces.iterdir() if p.is_dir()):
        sessions = list(load(folder))
        ids = sorted(s.id for s in sessions)
        first_half = set(ids[: (len(ids) + 1) // 2])
        for s in sessions:
            calls: dict[str, tuple[str, str]] = {}
            for m in s.messages:
                for c in m.get("tool_calls") or ():
                    fn = c.get("function") or {}
                    calls[str(c.get("id"))] = (str(fn.get("name", "")), str(fn.get("arguments", "")))
                if m.get("role") != "tool":
                    continue
                content = m.get("content")
                if not isinstance(content, str) or not content or (len(content) <= gate) != below:
                    continue
                name, args = calls.get(str(m.get("tool_call_id")), (str(m.get("name") or ""), ""))
                half = "A" if s.id in first_half else "B"
                yield Output(folder.name, s.id, name, args, content, str(m.get("tool_call_id")), half)


def _args(arguments: str) -> dict:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def is_code_read(tool: str) -> bool:
    return tool_family(tool) in READ_FAMILIES


def kept_share(original: str, reduced: str) -> float:
    """Share of the original's non-blank lines found verbatim among the reduced text's
    lines (a line-number prefix on either side ignored)."""
    strip = lambda ln: _NUMBER_PREFIX.sub("", ln, count=1).strip()  # noqa: E731
    have = {strip(ln) for ln in reduced.splitlines()}
    lines = [strip(ln) for ln in original.splitlines() if ln.strip()]
    if not lines:
        return 1.0
    return sum(1 for ln in lines if ln in have) / len(lines)


def words_kept(original: str, reduced: str) -> float:
    """Share of the original's distinct words (`\\w+`) that the reduced text still shows."""
    words = set(_WORD.findall(original))
    if not words:
        return 1.0
    return len(words & set(_WORD.findall(reduced))) / len(words)


@dataclass(slots=True)
class Row:
    ratios: list[float]
    kept: list[float]
    words: list[float]
    grown: int = 0
    unchanged: int = 0

    def add(self, orig: str, red: str) -> None:
        self.ratios.append(len(red) / len(orig))
        self.kept.append(kept_share(orig, red))
        self.words.append(words_kept(orig, red))
        self.grown += len(red) > len(orig)
        self.unchanged += red == orig

    def line(self, label: str) -> str:
        r = sorted(self.ratios)
        p25 = r[max(0, (len(r) + 3) // 4 - 1)] if r else float("nan")
        return (
            f"| {label} | {len(r)} | {statistics.median(r):.3f} | {p25:.3f} | "
            f"{statistics.mean(self.kept):.1%} | {statistics.mean(self.words):.1%} | "
            f"{self.unchanged} | {self.grown} |"
        )


def _tally(rows: dict[str, Row], o: Output, red: str, halves: bool = False) -> None:
    for key in ("all", f"set {o.trace_set}", f"tool {o.trace_set}/{o.tool}"):
        rows[key].add(o.text, red)
    if not is_code_read(o.tool):
        rows["non-code-read"].add(o.text, red)
        rows[f"non-code-read {o.trace_set}"].add(o.text, red)
    if not reads_a_file(o.tool, _args(o.arguments)):
        rows["not a file's text"].add(o.text, red)
        rows[f"not a file's text {o.trace_set}"].add(o.text, red)
        if halves:
            rows[f"not a file's text, half {o.half}"].add(o.text, red)
            rows[f"not a file's text, half {o.half} {o.trace_set}"].add(o.text, red)


def measure(traces: Path, cfg: Config, *, below: bool = False, halves: bool = False) -> dict[str, Row]:
    """Each output alone, through `reduce_tool_output` (no session state: no dedup)."""
    rows: dict[str, Row] = defaultdict(lambda: Row([], [], []))
    with tempfile.TemporaryDirectory() as tmp:
        tp = TokenPilot(cfg, store=ArtifactStore(tmp), lifecycle=False)
        for o in outputs(traces, below=below):
            red = tp.reduce_tool_output(o.text, o.tool, o.arguments, session_id=o.session).text
            _tally(rows, o, red, halves)
    return rows


def timing(traces: Path, cfg: Config) -> list[str]:
    """Median and p95 ms per output of each pass run alone on the original (what it costs
    on the proxy's critical path as the first pass), and of the whole reduction."""
    pipe = Pipeline(cfg)
    times: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        tp = TokenPilot(cfg, store=ArtifactStore(tmp), lifecycle=False)
        for o in outputs(traces):
            ctx = PassContext(
                tool_name=o.tool, arguments=_args(o.arguments), artifact_id=artifact_id_for(o.text)
            )
            for name, p in pipe.passes_for(o.tool):
                if name == "image_downsample":
                    continue  # text outputs: it never looks at them
                t0 = time.perf_counter()
                p.apply(o.text, ctx)
                times[name].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            tp.reduce_tool_output(o.text, o.tool, o.arguments, session_id=o.session)
            times["(whole reduce_tool_output)"].append((time.perf_counter() - t0) * 1000)
    lines = ["| pass | outputs | median ms | p95 ms | max ms |", "|---|---|---|---|---|"]
    for name, ts in sorted(times.items()):
        ts.sort()
        p95 = ts[min(len(ts) - 1, int(0.95 * len(ts)))]
        lines.append(f"| {name} | {len(ts)} | {statistics.median(ts):.3f} | {p95:.3f} | {ts[-1]:.2f} |")
    return lines


def measure_in_session(traces: Path, cfg: Config) -> dict[str, Row]:
    """The same outputs as each session's history ingests them (`prepare` over the whole
    recorded history, no eviction): repeated outputs deduplicated, loops withheld."""
    rows: dict[str, Row] = defaultdict(lambda: Row([], [], []))
    frozen: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tp = TokenPilot(cfg, store=ArtifactStore(tmp), lifecycle=False)
        for folder in sorted(p for p in traces.iterdir() if p.is_dir()):
            for s in load(folder):
                p = tp.prepare(s.messages, s.tools or None, session_id=s.id)
                for m in p.messages:
                    if m.get("role") == "tool" and isinstance(m.get("content"), str):
                        frozen[(s.id, str(m.get("tool_call_id")))] = m["content"]
        for o in outputs(traces):
            red = frozen.get((o.session, o.call_id))
            if red is not None:
                _tally(rows, o, red)
    return rows


def _restored(restore, text: str) -> str | None:  # noqa: ANN001
    try:
        return restore(text)
    except ValueError:  # not a re-encoded JSON document
        return None


def fidelity(traces: Path, cfg: Config, pages: Path | None) -> list[str]:
    """Per content kind (`tokenpilot.passes.kinds`): outputs, median size ratio, and the
    share of word 4-grams kept (median, p10, min): of the original for tool outputs, of the
    article (Readability's expected.html) for web pages. A pass that saves tokens by losing
    content shows here, beside the size it saves."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from html_metrics import grams_kept, visible_text

    from tokenpilot.passes.kinds import content_kind
    from tokenpilot.passes.small_json import restore

    sizes: dict[str, list[float]] = defaultdict(list)
    kept: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        tp = TokenPilot(cfg, store=ArtifactStore(tmp), lifecycle=False)
        for o in outputs(traces):
            red = tp.reduce_tool_output(o.text, o.tool, o.arguments, session_id=o.session).text
            kind = content_kind(o.text, o.tool, _args(o.arguments))
            sizes[kind].append(len(red) / len(o.text))
            lossless = red == o.text or _restored(restore, red) == o.text  # re-encoded JSON: all kept
            kept[kind].append(1.0 if lossless else grams_kept(o.text, red))
        for d in sorted(p for p in (pages.iterdir() if pages and pages.is_dir() else ()) if p.is_dir()):
            src = (d / "source.html").read_text(encoding="utf-8", errors="surrogateescape")
            article = visible_text(
                (d / "expected.html").read_text(encoding="utf-8", errors="surrogateescape")
            )
            red = tp.reduce_tool_output(src, "web_fetch", "{}", session_id="pages").text
            sizes["markup (web pages)"].append(len(red) / len(src))
            kept["markup (web pages)"].append(1.0 if red == src else grams_kept(article, red))
    lines = [
        "| content kind | outputs | median size | 4-grams kept, median | p10 | min |",
        "|---|---|---|---|---|---|",
    ]
    for kind in sorted(sizes):
        k = sorted(kept[kind])
        lines.append(
            f"| {kind} | {len(k)} | {statistics.median(sizes[kind]):.3f} | {statistics.median(k):.3f} | "
            f"{k[len(k) // 10]:.3f} | {k[0]:.3f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="?", type=Path, default=default_traces_dir())
    ap.add_argument("--without", default="", help="comma-separated passes to take out of every profile")
    ap.add_argument(
        "--in-session",
        action="store_true",
        help="also the outputs as their sessions ingest them (dedup included)",
    )
    ap.add_argument("--halves", action="store_true", help="also per half of each set's sessions (by id)")
    ap.add_argument("--timing", action="store_true", help="also each pass's ms per output")
    ap.add_argument(
        "--truncate-at",
        type=int,
        metavar="CHARS",
        help="cut every tool family that has a truncation limit at CHARS instead (the paper's "
        "600/400 preview; reads stay whole): the ablation row tokenpilot_truncate_at_gate is 2200",
    )
    args = ap.parse_args(argv)
    if not args.traces.exists():
        print(f"{args.traces} not found", file=sys.stderr)
        return 2
    cfg = Config() if args.truncate_at is None else truncating_at(args.truncate_at)
    off = {p for p in args.without.split(",") if p}
    if off:
        profiles = {k: tuple(p for p in v if p not in off) for k, v in cfg.profiles.items()}
        cfg = cfg.replace(passes=tuple(p for p in cfg.passes if p not in off), profiles=profiles)
    tables = [("above", False), ("up to", True)] + ([("in session, above", None)] if args.in_session else [])
    for label, below in tables:
        if below is None:
            rows = measure_in_session(args.traces, cfg)
        else:
            rows = measure(args.traces, cfg, below=below, halves=args.halves and not below)
        print(f"\nTool outputs {label} {GATE:,} chars\n")
        print(
            "| outputs | count | median ratio | p25 | lines kept verbatim | words kept | unchanged | grown |"
        )
        print("|---|---|---|---|---|---|---|---|")
        order = sorted(
            rows, key=lambda k: (k != "all", k != "non-code-read", k.startswith("tool"), k.split(" ")[0], k)
        )
        for key in order:
            if below and key.startswith("tool") and rows[key].unchanged == len(rows[key].ratios):
                continue  # under the gate, only the tools something happens to
            print(rows[key].line(key))
    pages = args.traces.parent / "html" / "readability"
    print(f"\nFidelity per content kind (outputs above {GATE:,} chars; web pages: {pages})\n")
    print("\n".join(fidelity(args.traces, cfg, pages)))
    if args.timing:
        print(f"\nTime per output above {GATE:,} chars, each pass alone on the original\n")
        print("\n".join(timing(args.traces, cfg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
