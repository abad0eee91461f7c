"""Ingestion throughput of the reduction passes on realistic, generated inputs.

Each pass reduces a tool output once, when it enters the history; this measures how
fast (MB of input per second, median of 5 runs) and how much (output / input size).

    .venv/bin/python benchmarks/bench_passes.py
"""

from __future__ import annotations

import base64
import io
import json
import random
import statistics
import time
from collections.abc import Callable

from PIL import Image

from tokenpilot.passes.base import PassContext
from tokenpilot.passes.format_cleaning import FormatCleaning
from tokenpilot.passes.format_slimming import FormatSlimming
from tokenpilot.passes.images import ImageDownsample
from tokenpilot.passes.json_minify import JsonMinify
from tokenpilot.passes.line_numbers import LineNumberStrip
from tokenpilot.passes.paths import PathTruncation
from tokenpilot.passes.tool_args import ToolArgTruncation
from tokenpilot.passes.truncate import Truncation

RUNS = 5
MB = 1_000_000


def build_log(size: int, rng: random.Random) -> str:
    """A cargo/pytest-like log with colours, progress redraws, long paths and rules."""
    out: list[str] = []
    n = 0
    while n < size:
        k = rng.randrange(6)
        if k == 0:
            line = (
                f"\x1b[1m\x1b[32m   Compiling\x1b[0m crate_{rng.randrange(999)} v0.{rng.randrange(9)}.0   \n"
            )
        elif k == 1:
            line = "".join(f"Downloading {p:3d}%\r" for p in range(0, 101, 10)) + "\n"
        elif k == 2:
            line = (
                "/home/runner/work/project/project/target/debug/build/"
                f"crate_{rng.randrange(99)}-{rng.getrandbits(64):016x}/out/generated/module_{rng.randrange(99)}.rs"
                f":{rng.randrange(999)}:{rng.randrange(99)}: \x1b[33mwarning\x1b[0m: unused import\n"
            )
        elif k == 3:
            line = "=" * 30 + " test session starts " + "=" * 30 + "\n\n\n\n"
        elif k == 4:
            line = f"tests/test_{rng.randrange(99)}.py::test_case_{rng.randrange(999)} \x1b[32mPASSED\x1b[0m\u200b\n"
        else:
            line = f"|  col_{rng.randrange(9)}   |   {rng.randrange(10**6):>8} |  ok   |\n"
        out.append(line)
        n += len(line)
    return "".join(out)


def pretty_json(size: int, rng: random.Random) -> str:
    items = []
    n = 0
    while n < size:
        item = {
            "id": rng.randrange(10**9),
            "name": f"repo-{rng.randrange(10**6)}",
            "description": "Caf\u00e9 \u2615 "
            + " ".join(rng.choice(["fast", "tiny", "json", "api"]) for _ in range(8)),
            "stars": rng.randrange(10**5),
            "score": rng.random(),
            "topics": [rng.choice(["cli", "web", "ml", "db"]) for _ in range(3)],
            "owner": {"login": f"user{rng.randrange(10**4)}", "site_admin": False},
        }
        items.append(item)
        n += 330
    return json.dumps(items, indent=2)


def cat_n(size: int, rng: random.Random) -> str:
    out: list[str] = []
    n = 0
    i = 1
    while n < size:
        code = (
            "    " * rng.randrange(4)
            + f"value_{rng.randrange(999)} = compute(arg_{rng.randrange(99)})  # note"
        )
        line = f"{i:6d}\t{code}\n"
        out.append(line)
        n += len(line)
        i += 1
    return "".join(out)


def png_uri(size: int, rng: random.Random) -> str:
    side = int((size / 3) ** 0.5)
    img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=1)
    return "Screenshot: data:image/png;base64," + base64.b64encode(buf.getvalue()).decode() + "\n"


def tool_args(size: int, rng: random.Random) -> str:
    content = "".join(f"line {i}: {rng.getrandbits(64):x}\n" for i in range(size // 26))
    return json.dumps({"path": "src/generated.py", "content": content, "edits": [{"old": content[:9000]}]})


def bench(fn: Callable[[], str], nbytes: int) -> tuple[float, float]:
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return nbytes / MB / med, med


def main() -> None:
    rng = random.Random(0)
    log = build_log(5 * MB, rng)
    js = pretty_json(2 * MB, rng)
    numbered = cat_n(1 * MB, rng)
    img = png_uri(3 * MB, rng)
    args = tool_args(1 * MB, rng)
    ctx_bash = PassContext(tool_name="bash", artifact_id="bench")
    ctx_read = PassContext(tool_name="read", artifact_id="bench")
    cases = [
        ("truncate", Truncation(), log, "5 MB ANSI build log", ctx_bash),
        ("format_cleaning", FormatCleaning(), log, "5 MB ANSI build log", ctx_bash),
        (
            "format_slimming",
            FormatSlimming(),
            FormatCleaning().apply(log, ctx_bash),
            "5 MB log, cleaned",
            ctx_bash,
        ),
        ("paths", PathTruncation(), log, "5 MB ANSI build log", ctx_bash),
        ("json_minify", JsonMinify(), js, "2 MB pretty JSON", ctx_bash),
        ("line_numbers", LineNumberStrip(), numbered, "1 MB cat -n file", ctx_read),
        ("images", ImageDownsample(), img, "3 MB PNG data URI", ctx_bash),
        ("tool_args", ToolArgTruncation(), args, "1 MB write_file args", ctx_bash),
    ]
    print(f"{'pass':<16} {'input':<22} {'in MB':>7} {'out/in':>7} {'median s':>9} {'MB/s':>8}")
    print("-" * 73)
    for name, p, text, label, ctx in cases:
        nbytes = len(text.encode("utf-8", "surrogatepass"))
        mbps, med = bench(lambda p=p, text=text, ctx=ctx: p.apply(text, ctx), nbytes)
        out = p.apply(text, ctx)
        ratio = len(out.encode("utf-8", "surrogatepass")) / nbytes
        print(f"{name:<16} {label:<22} {nbytes / MB:7.2f} {ratio:7.3f} {med:9.4f} {mbps:8.1f}")


if __name__ == "__main__":
    main()
