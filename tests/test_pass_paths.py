"""PathTruncation: long paths lose middle directories, keep root and file name; URLs untouched."""

from __future__ import annotations

import time

import pytest

from tokenpilot.passes.base import PassContext, ReductionPass
from tokenpilot.passes.paths import PathTruncation, elide_path

CTX = PassContext(tool_name="bash", artifact_id="art-1")

LONG = "/home/ci/.cache/pypoetry/virtualenvs/app-x1y2z3-py3.11/lib/python3.11/site-packages/pkg/sub/mod.py"


def test_is_a_reduction_pass() -> None:
    assert isinstance(PathTruncation(), ReductionPass)
    assert PathTruncation.name == "paths"


def test_long_path_in_traceback() -> None:
    text = f'  File "{LONG}", line 42, in run\n'
    out = PathTruncation().apply(text, CTX)
    short = out.split('"')[1]
    assert short == "/home/ci/.cache/pypoetry/virtualenvs/…/python3.11/site-packages/pkg/sub/mod.py"
    assert len(short) <= 80 and short.startswith("/home/") and short.endswith("/pkg/sub/mod.py")
    assert out.endswith('", line 42, in run\n')


def test_spec_example_shape() -> None:
    path = "/very/long/" + "/".join(["directory_name_" + c for c in "abcdefgh"]) + "/pkg/file.py"
    assert elide_path(path, 26) == "/very/long/…/pkg/file.py"


def test_short_paths_and_plain_text_untouched() -> None:
    text = "edited src/tokenpilot/passes/paths.py and /etc/hosts; and/or 1/2 of TCP/IP"
    assert PathTruncation().apply(text, CTX) is text


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com/"
        + "/".join(["segment_number_" + str(i) for i in range(12)])
        + "/index.html",
        "clone git+ssh://git@host/" + "/".join(["a" * 20] * 6) + ".git now",
        "www.example.org/" + "/".join(["part" * 6] * 6) + "/page",
        "![x](data:image/png;base64,"
        + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk/" * 3
        + ")",
        "token aGVsbG8vd29ybGQvdGhpcy9pcy9hL2xvbmcvYmFzZTY0L3N0cmluZy8xMjM0NTY3ODkw/QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=",
    ],
    ids=["https", "git+ssh", "www", "data-uri", "base64"],
)
def test_urls_and_blobs_untouched(text: str) -> None:
    assert PathTruncation().apply(text, CTX) is text


def test_windows_and_relative_paths() -> None:
    win = (
        r"C:\Users\someone\AppData\Local\Programs\Python\Python311\Lib\site-packages\numpy\core\multiarray.py"
    )
    rel = "./node_modules/.pnpm/@babel+core@7.24.0/node_modules/@babel/core/lib/transformation/file/file.js"
    out = PathTruncation().apply(f"{win}\n{rel}", CTX)
    w, r = out.split("\n")
    assert w.startswith("C:\\Users\\") and w.endswith("\\numpy\\core\\multiarray.py") and "…" in w
    assert r.startswith("./node_modules/") and r.endswith("/file/file.js") and "…" in r
    assert len(w) <= 80 and len(r) <= 80


def test_line_suffix_and_punctuation_kept() -> None:
    text = f"{LONG}:12:5: error E501 ({LONG})."
    out = PathTruncation().apply(text, CTX)
    assert out.count("…") == 2 and ":12:5: error E501 (" in out and out.endswith(").")


def test_file_name_never_cut() -> None:
    name = "a_very_long_generated_file_name_" + "x" * 100 + ".py"
    path = f"/tmp/build/output/{name}"
    out = PathTruncation().apply(path, CTX)
    assert out == f"/tmp/…/{name}"


def test_same_path_same_elision_and_pure() -> None:
    text = f"{LONG}\n{LONG}\n"
    out = PathTruncation().apply(text, CTX)
    a, b, _ = out.split("\n")
    assert a == b != LONG
    assert PathTruncation().apply(text, CTX) == out
    assert PathTruncation().apply(out, CTX) is out  # already short: idempotent


# -- every setting changes behaviour ----------------------------------------------------


def test_setting_max_len() -> None:
    assert PathTruncation(max_len=200).apply(LONG, CTX) is LONG
    at_80 = PathTruncation().apply(LONG, CTX)
    at_40 = PathTruncation(max_len=40).apply(LONG, CTX)
    assert len(at_40) <= 40 < len(at_80) <= 80
    assert at_40 == "/home/…/pkg/sub/mod.py" or at_40.endswith("/mod.py")


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "\udcff/" * 100, "/\x00" * 1000, "/" * 100_000, "\\\\" * 50_000, "a/" * 50_000, LONG + "\ud800"],
    ids=["empty", "surrogates", "nul", "slashes", "backslashes", "deep", "surrogate-tail"],
)
def test_bad_input_does_not_raise(text: str) -> None:
    out = PathTruncation().apply(text, CTX)
    assert isinstance(out, str)
    assert PathTruncation().apply(text, CTX) == out


def test_huge_word_is_linear() -> None:
    text = "a" * 5_000_000 + " /b/c " + "http" * 1_000_000
    t0 = time.perf_counter()
    assert PathTruncation().apply(text, CTX) is text
    assert time.perf_counter() - t0 < 5.0
    assert PathTruncation().apply(None, CTX) is None  # type: ignore[arg-type]
