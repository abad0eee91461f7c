"""The end-to-end contract (tests/contract.py) on every real output in ../shared and on
generated mixes: through the default facade, every cut is marked where it is, says what
it cut, and recalls exactly those bytes."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
from conftest import REPO, shared_path
from contract import check_render, render_through_facade
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpilot import TokenPilot
from tokenpilot.store.artifacts import ArtifactStore

sys.path.insert(0, str(REPO / "benchmarks"))
from bench_reduction import outputs  # noqa: E402


@pytest.fixture(scope="module")
def tp(tmp_path_factory) -> TokenPilot:
    return TokenPilot(store=ArtifactStore(str(tmp_path_factory.mktemp("store"))), lifecycle=False)


def test_every_shared_tool_output_keeps_the_contract(tp) -> None:
    kinds: Counter[str] = Counter()
    for i, o in enumerate(outputs(shared_path("traces"))):
        rendered = render_through_facade(tp, f"out{i}", o.tool, o.arguments, o.text)
        kinds[check_render(tp, f"out{i}", o.tool, o.arguments, o.text, rendered)] += 1
    assert sum(kinds.values()) >= 300, kinds
    assert kinds["text"] >= 30, kinds  # the passes cut something, and the cuts were checked


def test_the_pinchbench_payloads_keep_the_contract(tp) -> None:
    files = sorted(p for p in shared_path("traces", "pinchbench_payloads").rglob("*") if p.is_file())
    files = [p for p in files if p.name not in ("LICENSE", "README.md")]
    assert files
    for i, path in enumerate(files):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        for tool in ("web_fetch", "exec", "read"):
            args = json.dumps({"path": str(path.name)})
            rendered = render_through_facade(tp, f"pb{i}{tool}", tool, args, text)
            check_render(tp, f"pb{i}{tool}", tool, args, text, rendered)


def _pages():
    root = shared_path("html", "readability")
    return sorted(d for d in root.iterdir() if (d / "source.html").is_file())


def test_every_readability_page_keeps_the_contract(tp) -> None:
    kinds: Counter[str] = Counter()
    for d in _pages():
        html = (d / "source.html").read_text(encoding="utf-8", errors="surrogateescape")
        args = json.dumps({"url": f"https://example.org/{d.name}"})
        rendered = render_through_facade(tp, f"page-{d.name}", "web_fetch", args, html)
        kinds[check_render(tp, f"page-{d.name}", "web_fetch", args, html, rendered)] += 1
    assert kinds["page"] >= 100, kinds


def test_the_contract_fails_when_a_text_pass_reads_markup(tmp_path, monkeypatch) -> None:
    """What issue #38 saw: log folding ran on raw markup before the HTML pass. Put it back in
    front (markup classed as prose, log folding first) and the contract check must fail."""
    import tokenpilot.ingest.pipeline as pipeline
    from tokenpilot.passes.html import HtmlSlimming

    d = shared_path("html", "readability", "social-buttons")
    html = (d / "source.html").read_text(encoding="utf-8")
    monkeypatch.setattr(pipeline, "content_kind", lambda text, tool, args: "prose")
    monkeypatch.setattr(HtmlSlimming, "accepts", frozenset({"prose"}))
    order = ("log_folding", "html_slimming") + tuple(
        n for n in pipeline.PASS_ORDER if n not in ("log_folding", "html_slimming")
    )
    monkeypatch.setattr(pipeline, "PASS_ORDER", order)
    tp = TokenPilot(store=ArtifactStore(str(tmp_path)), lifecycle=False)
    rendered = render_through_facade(tp, "s", "web_fetch", "{}", html)
    with pytest.raises(AssertionError):
        check_render(tp, "s", "web_fetch", "{}", html, rendered)


# -- generated mixes ----------------------------------------------------------------------

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=9)
_sentence = st.lists(_word, min_size=4, max_size=18).map(lambda ws: " ".join(ws).capitalize() + ".")
_log_line = st.builds(
    lambda n, lvl, w: f"2024-05-0{n % 9 + 1} 12:00:{n % 60:02d} {lvl} worker {n}: {w}",
    st.integers(0, 10_000),
    st.sampled_from(["INFO", "DEBUG", "WARN", "ERROR"]),
    _word,
)


def _page(body: str) -> str:
    return f"<!DOCTYPE html><html><head><title>Generated</title></head><body>{body}</body></html>"


@st.composite
def _mixes(draw) -> tuple[str, str]:
    paras = draw(st.lists(_sentence, min_size=1, max_size=25))
    chrome = draw(st.lists(_sentence, min_size=0, max_size=30))
    nav = (
        "<nav><ul>"
        + "".join(f"<li><a href='/p{i}'>{c}</a></li>" for i, c in enumerate(chrome))
        + "</ul></nav>"
    )
    article = "<article>" + "".join(f"<p>{p}</p>" for p in paras) + "</article>"
    kind = draw(st.sampled_from(["pre-log", "json-in-html", "log-with-html", "repeated", "no-article"]))
    if kind == "pre-log":
        log = "\n".join(draw(st.lists(_log_line, min_size=20, max_size=120)))
        return "web_fetch", _page(nav + article + f"<pre>{log}</pre><footer>{' '.join(chrome)}</footer>")
    if kind == "json-in-html":
        rows = [{"id": i, "name": draw(_word)} for i in range(draw(st.integers(10, 80)))]
        return "web_fetch", _page(nav + article + f"<pre>{json.dumps(rows, indent=2)}</pre>")
    if kind == "log-with-html":
        lines = draw(st.lists(_log_line, min_size=30, max_size=150))
        k = draw(st.integers(0, len(lines) - 1))
        lines.insert(k, "response body: <html><body><div><p>" + paras[0] + "</p></div></body></html>")
        return "exec", "\n".join(lines)
    if kind == "repeated":
        para = "".join(f"<p>{paras[0]}</p>" for _ in range(draw(st.integers(5, 40))))
        return "web_fetch", _page(nav + "<article>" + para + "</article>" + nav)
    divs = "".join(f"<div class='menu'>{c}</div>" for c in chrome) + "".join(f"<div>{p}</div>" for p in paras)
    return "web_fetch", _page(nav + divs + "<aside>" + " ".join(chrome) + "</aside>")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mixes())
def test_generated_mixes_keep_the_contract(tmp_path_factory, mix) -> None:
    tool, text = mix
    tp = TokenPilot(store=ArtifactStore(str(tmp_path_factory.mktemp("mix"))), lifecycle=False)
    args = json.dumps({"url": "https://example.org/x"} if tool == "web_fetch" else {"command": "run"})
    rendered = render_through_facade(tp, "s", tool, args, text)
    check_render(tp, "s", tool, args, text, rendered)
