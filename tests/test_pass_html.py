"""HtmlSlimming: a web page becomes the compact text a reader sees; anything else is untouched."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

import pytest
from conftest import shared_path
from html_metrics import lcs_length, retention, visible_text, words

from tokenpilot.passes.base import PassContext, ReductionPass
from tokenpilot.passes.html import HtmlSlimming, looks_like_html

CTX = PassContext(tool_name="web_fetch", artifact_id="art-1")
# Most fixtures below are small; their links are written inline, where a test reads them.
SLIM = HtmlSlimming(min_chars=0, list_links=False)


def article(doc: str, slim: HtmlSlimming = SLIM, ctx: PassContext = CTX) -> str:
    """What the pass classes as the page's article: its lines that are not cut. (What it
    shows also keeps a cut too short for a marker; tests/test_contract_pages.py checks that.)"""
    got = slim.page(doc, ctx)
    assert got is not None
    return "\n".join(line for line, why in zip(got.lines, got.reasons) if why is None)


def page(body: str, head: str = "<title>A page</title>") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


ARTICLE = page(
    """
    <nav><a href="/">Home</a> <a href="/about">About us</a></nav>
    <article>
      <h1>Main   Heading</h1>
      <p class="lead" style="color:red">First <b>bold</b> paragraph, with a
         <a href="https://other.org/page?utm_source=x&amp;id=3">useful link</a>.</p>
      <!-- an HTML comment -->
      <h2>List</h2>
      <ul><li>one</li><li>two <em>items</em></li><li><p>para in item</p></li></ul>
      <table><tr><th>Name</th><th>Value</th></tr><tr><td>alpha</td><td>1</td></tr></table>
      <pre><code>def f():
    return 1 &lt; 2
</code></pre>
      <p hidden>hidden attribute</p>
      <p style="display: none">display none</p>
      <p aria-hidden="true">aria hidden</p>
      <div class="share-buttons"><a href="https://facebook.com/sharer">Share on Facebook</a></div>
      <p>Closing words.</p>
    </article>
    <script>var tracking = "script text";</script><style>p { color: blue }</style>
    <aside>Sidebar stuff</aside>
    <div id="cookie-banner">We use cookies. <button>Accept</button></div>
    <form><label>Search</label><input name="q"></form>
    <footer>Copyright 2024</footer>
    """,
    head="<title>Main Heading | Example Site</title><meta charset='utf-8'><style>x{}</style>",
)


def test_is_a_reduction_pass() -> None:
    assert isinstance(HtmlSlimming(), ReductionPass)
    assert HtmlSlimming.name == HtmlSlimming().name == "html_slimming"
    with pytest.raises(dataclasses.FrozenInstanceError):
        HtmlSlimming().min_chars = 3  # type: ignore[misc]


def test_renders_markdownish_text() -> None:
    out = article(ARTICLE)
    assert out == (
        "# Main Heading\n"
        "First bold paragraph, with a [useful link](https://other.org/page?id=3).\n"
        "## List\n"
        "- one\n"
        "- two items\n"
        "- para in item\n"
        "Name | Value\n"
        "alpha | 1\n"
        "```\n"
        "def f():\n"
        "    return 1 < 2\n"
        "```\n"
        "Closing words."
    )


def test_drops_invisible_and_chrome() -> None:
    out = article(ARTICLE)
    for gone in (
        "script text",
        "color",
        "comment",
        "hidden attribute",
        "display none",
        "aria hidden",
        "Share on Facebook",
        "Sidebar",
        "cookies",
        "Search",
        "Copyright",
        "About us",
        "<p",
        "<a ",
        "class=",
    ):
        assert gone not in out, gone


def test_pure_and_deterministic() -> None:
    a = SLIM.apply(ARTICLE, CTX)
    b = SLIM.apply(ARTICLE, CTX)
    c = HtmlSlimming(min_chars=0, list_links=False).apply(ARTICLE, PassContext())
    assert a == b == c
    assert isinstance(a, str)


# -- which inputs it leaves alone ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "plain text, with a < and a > in it.\n" * 40,
        json.dumps({"html": "<html><body><p>x</p></body></html>", "items": list(range(300))}),
        json.dumps([{"a": "<div>x</div>"}] * 50, indent=2),
        "if (a < b && c > d) { return x << 2; }\nfor (i = 0; i < n; i++) {}\n" * 30,
        "import React from 'react';\n"
        + "export const A = () => <div><p>hi</p><ul><li>x</li></ul></div>;\n" * 30,
        "Use the <b> tag for bold and <i> for italics; see <code>.\n" * 30,
        "def render():\n    return '<html><body>' + body + '</body></html>'\n" * 30,
        "<?xml version='1.0'?><rss><channel>" + "<item><title>t</title><link>u</link></item>" * 30,
        "<svg xmlns='http://www.w3.org/2000/svg'>" + "<g><title>t</title><text>x</text></g>" * 30,
    ],
)
def test_not_html_is_untouched(text: str) -> None:
    assert not looks_like_html(text)
    assert SLIM.apply(text, CTX) is text


@pytest.mark.parametrize(
    "text",
    [
        "<!DOCTYPE html><html><body><p>x</p></body></html>",
        "\ufeff<!doctype html>\n<html>",
        "  <html lang='en'><head><title>t</title></head>",
        "<?xml version='1.0'?>\n<!DOCTYPE html PUBLIC '-//W3C//DTD XHTML 1.0'><html>",
        "<!-- generated -->\n<html><body>",
        "<div class='x'><p>a</p><p>b</p><ul><li>c</li><li>d</li></ul><a href='#'>e</a></div>",
    ],
)
def test_looks_like_html(text: str) -> None:
    assert looks_like_html(text)


def test_output_not_smaller_returns_input() -> None:
    tiny = "<html><body>" + "word " * 5 + "</body></html>"
    out = HtmlSlimming(min_chars=0).apply(tiny, CTX)
    assert out == "word word word word word"
    bare = "<html>" + "x" * 10
    assert HtmlSlimming(min_chars=0).apply(bare, CTX) == "x" * 10
    empty = "<html><body></body></html>"
    assert HtmlSlimming(min_chars=0).apply(empty, CTX) is empty


# -- every setting changes behaviour ------------------------------------------------------


def test_min_chars() -> None:
    small = page("<p>" + "short page " * 10 + "</p>")
    assert len(small) < HtmlSlimming().min_chars
    assert HtmlSlimming().apply(small, CTX) is small
    assert HtmlSlimming(min_chars=0).apply(small, CTX).startswith("# A page\nshort page")


def test_max_input_chars() -> None:
    assert HtmlSlimming(max_input_chars=len(ARTICLE) - 1).apply(ARTICLE, CTX) is ARTICLE
    assert HtmlSlimming(min_chars=0, max_input_chars=len(ARTICLE)).apply(ARTICLE, CTX) != ARTICLE


def test_skip_tools() -> None:
    for tool in ("Read", "mcp__fs__read_file", "functions.str_replace_based_edit_tool", "cat"):
        assert SLIM.apply(ARTICLE, PassContext(tool_name=tool)) is ARTICLE, tool
    assert SLIM.apply(ARTICLE, PassContext(tool_name="WebFetch")) != ARTICLE
    assert SLIM.apply(ARTICLE, PassContext()) != ARTICLE
    everything = HtmlSlimming(min_chars=0, skip_tools=frozenset())
    assert article(ARTICLE, everything, PassContext(tool_name="read_file")).startswith("# Main Heading")


def test_keep_links() -> None:
    doc = page('<p>See <a href="https://docs.example.org/guide">the guide</a> now.</p>')
    assert "See [the guide](https://docs.example.org/guide) now." in SLIM.apply(doc, CTX)
    assert "See the guide now." in HtmlSlimming(min_chars=0, keep_links=False).apply(doc, CTX)
    # Listed (the default): the sentence reads as it does on the page; the link follows it.
    listed = HtmlSlimming(min_chars=0).page(doc, CTX)
    assert listed is not None
    assert listed.lines[-2:] == ("See the guide now.", "- the guide: https://docs.example.org/guide")
    assert listed.reasons[-2:] == (None, "links")


def test_max_href_chars() -> None:
    href = "https://example.org/" + "a" * 100
    doc = page(f'<p>A <a href="{href}">long one</a>.</p>')
    assert f"[long one]({href})" in SLIM.apply(doc, CTX)
    assert "A long one." in HtmlSlimming(min_chars=0, max_href_chars=100).apply(doc, CTX)


def test_drop_chrome() -> None:
    doc = page("<nav>Top menu</nav><p>Body text.</p><footer>Legal stuff</footer>")
    assert article(doc) == "# A page\nBody text."
    kept = HtmlSlimming(min_chars=0, drop_chrome=False).apply(doc, CTX)
    assert kept == "# A page\nTop menu\nBody text.\nLegal stuff"


def test_chrome_max_share() -> None:
    # A "sidebar" wrapper that holds most of the page is a layout name, not chrome.
    # (Text outside <p>, so that the densest-paragraphs rule, tested below, does not apply.)
    doc = page('<div class="with-sidebar">' + "main words " * 20 + "</div><p>tail</p>")
    assert "main words" in SLIM.apply(doc, CTX)
    assert "main words" not in HtmlSlimming(min_chars=0, chrome_max_share=1.0).apply(doc, CTX)


def test_keep_title() -> None:
    doc = page("<p>Body text.</p>", head="<title>Doc  title</title>")
    assert SLIM.apply(doc, CTX) == "# Doc title\nBody text."
    assert HtmlSlimming(min_chars=0, keep_title=False).apply(doc, CTX) == "Body text."
    # No repeat when the page's own h1 says it already.
    doc = page("<h1>Doc title</h1><p>Body text.</p>", head="<title>Doc title - Site</title>")
    assert SLIM.apply(doc, CTX) == "# Doc title\nBody text."


# -- chrome detection must not eat content ------------------------------------------------


def test_article_inside_chrome_named_wrapper_is_kept() -> None:
    doc = page(
        '<div id="menu"><article><p>' + "story " * 5 + "</p></article></div>"
        '<div class="sidebar"><article><p>card</p></article></div>' + "<p>" + "more " * 10 + "</p>"
    )
    out = article(doc)
    assert "story story" in out
    assert "card" not in out  # a small card in a sidebar is still chrome


def test_densest_paragraphs_are_never_chrome() -> None:
    # No <article>/<main>; the post sits in a "sidebar-layout" and holds under half the text.
    doc = page(
        '<div class="sidebar-layout"><p>'
        + "first para " * 10
        + "</p><p>"
        + "second para " * 10
        + "</p></div>"
        '<div class="related"><p>Other story</p></div>' + "<div>" + "other text " * 60 + "</div>"
    )
    out = article(doc)
    assert "first para" in out and "second para" in out
    assert "Other story" not in out


def test_heading_slug_ids_and_inline_classes_are_not_chrome() -> None:
    doc = page(
        '<div class="section" id="sharing-with-a-single-developer"><p>Sharing is the topic.</p></div>'
        '<p>I <a class="popup" href="javascript:void(0)">prefer</a> not to.</p>'
        '<div id="comments"><p>A reader comment.</p></div>'
        '<div id="respond"><p>Leave a reply</p></div>'
    )
    out = article(doc)
    assert "Sharing is the topic." in out
    assert "I prefer not to." in out
    assert "A reader comment." in out
    assert "Leave a reply" not in out


def test_hidden_classes_and_hidden_wrappers() -> None:
    doc = page('<p>Shown.</p><div class="hidden">Secret</div><span class="visually-hidden">Skip</span>')
    # A short hidden inline element stays as text: its marker would be longer than it.
    assert article(doc) == "# A page\nShown.\nSkip"
    # A page hidden until a script reveals it: the article survives.
    doc = page('<div style="display:none"><article><p>' + "real text " * 5 + "</p></article></div>")
    assert "real text" in SLIM.apply(doc, CTX)
    # aria-hidden on the whole page while a modal is open: kept by size.
    doc = page(
        '<div aria-hidden="true"><p>' + "page text " * 20 + '</p></div><div role="dialog">Sign up</div>'
    )
    out = article(doc)
    assert "page text" in out and "Sign up" not in out


# -- structure ----------------------------------------------------------------------------


def test_whitespace_collapsed_and_repeats_kept() -> None:
    # A page that says a thing twice says it twice: a dropped repeat would be lost unmarked.
    doc = page("<p>  a \n\t b  </p><p>same</p><p>same</p><div>same</div><p>other</p><p>same</p>")
    assert SLIM.apply(doc, CTX) == "# A page\na b\nsame\nsame\nsame\nother\nsame"


def test_layout_tables_render_as_blocks_data_tables_as_rows() -> None:
    doc = page(
        "<table><tr><td><p>Layout para</p><table><tr><td>in</td><td>ner</td></tr></table></td>"
        "<td>side</td></tr></table>"
        "<table><tr><th>k</th><th>v</th></tr><tr><td>a<br>b</td><td></td></tr><tr><td></td><td></td></tr></table>"
    )
    assert SLIM.apply(doc, CTX) == "# A page\nLayout para\nin | ner\nside\nk | v\na b | "


def test_headings_lists_and_br() -> None:
    doc = page(
        "<h3>Deep <span>head</span></h3><ol><li></li><li>x<br>y</li></ol><p>after</p><h2><button>Acc</button></h2>"
    )
    assert SLIM.apply(doc, CTX) == "# A page\n### Deep head\n- x\ny\nafter\n## Acc"


def test_links() -> None:
    head = '<title>T</title><link rel="canonical" href="https://site.com/blog/post">'
    doc = page(
        '<p><a href="https://site.com/blog/other">same site</a> '
        '<a href="https://site.com/blog/post#c">self</a> '
        '<a href="/relative">relative</a> '
        '<a href="javascript:go()">js</a> '
        '<a href="mailto:a@b.c">mail</a> '
        '<a href="https://x.org/">x.org</a> '
        '<a href="https://ext.org/a?utm_medium=m&fbclid=z&q=1">ext</a> '
        '<a href="https://ext.org/a?q=1">again</a> '
        '<a href="https://img.org/p"><img src="p.png"></a> '
        '<a href="//cdn.org/lib">cdn</a></p>',
        head=head,
    )
    assert SLIM.apply(doc, CTX) == (
        "# T\n[same site](/blog/other) self relative js mail x.org [ext](https://ext.org/a?q=1) again "
        "[cdn](https://cdn.org/lib)"
    )


def test_relative_links_resolved_against_base() -> None:
    doc = page(
        '<p><a href="foo/bar.html">rel</a> <a href="#top">top</a></p>', head='<base href="https://b.org/x/">'
    )
    assert SLIM.apply(doc, CTX) == "[rel](/x/foo/bar.html) top"


def test_link_spanning_blocks_keeps_text() -> None:
    doc = page('<a href="https://e.org/card"><div>Card title</div><div>Card body</div></a>')
    assert SLIM.apply(doc, CTX) == "# A page\nCard title\nCard body"


# -- bad input never raises ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "<html><body><div><p>unclosed <b>bold <i>italic" + " words" * 200,
        "<html><body>" + "<<<>>>" * 1000,
        "<html><body><table><tr><td>cell<tr><td><ul><li>x<li>y</table></ul><p>" * 50,
        "<!DOCTYPE html><html><body><p>" + "\x00\x01\ufffd" * 300 + "</p>",
        "<!DOCTYPE html><html><body><p>surrogates \udcff\udc80 here</p>" + "<p>text</p>" * 100,
        "<html><head><title>" + "t" * 5000,
        "<html><body><svg><foreignObject><p>x</p></foreignObject></svg><math><mi>x</mi></math>" * 30,
    ],
)
def test_broken_html_never_raises(text: str) -> None:
    out = SLIM.apply(text, CTX)
    assert isinstance(out, str)
    assert SLIM.apply(text, CTX) == out


def test_surrogates_still_slimmed() -> None:
    doc = page("<p>caf\udce9 latin-1 byte</p>" + "<p>more text</p>" * 50)
    out = SLIM.apply(doc, CTX)
    assert "latin-1 byte" in out and "<p>" not in out


def test_random_bytes_never_raise() -> None:
    rng = random.Random(1234)
    for _ in range(5):
        raw = bytes(rng.getrandbits(8) for _ in range(50_000)).decode("utf-8", "surrogateescape")
        for text in (raw, "<!DOCTYPE html><html><body>" + raw, "<div><p>" * 5 + raw):
            out = SLIM.apply(text, CTX)
            assert isinstance(out, str)
            assert SLIM.apply(text, CTX) == out


def test_huge_html() -> None:
    chunk = (
        '<div class="c"><h2>Section</h2><p>Some paragraph text that goes on for a while, with a '
        '<a href="https://e.com/x">link</a> in it.</p><script>var x = 1;</script></div>\n'
    )
    huge = "<!DOCTYPE html><html><body>" + chunk * (20_000_000 // len(chunk) + 1) + "</body></html>"
    assert len(huge) > 20_000_000
    t0 = time.perf_counter()
    assert HtmlSlimming().apply(huge, CTX) is huge  # over max_input_chars: untouched, at once
    assert time.perf_counter() - t0 < 1.0
    out = HtmlSlimming(max_input_chars=len(huge)).apply(huge, CTX)
    assert out.startswith("## Section\nSome paragraph text") and len(out) < len(huge) // 2


def test_deep_nesting_is_left_alone_quickly() -> None:
    # The HTML tree builder is quadratic in nesting depth; such input is refused up front.
    for text in (
        "<!DOCTYPE html><html><body>" + '<div class="share">' * 100_000 + "x" + "</div>" * 100_000,
        "<!DOCTYPE html><html><body>" + "<ul><li>a" * 100_000,
    ):
        t0 = time.perf_counter()
        assert SLIM.apply(text, CTX) is text
        assert time.perf_counter() - t0 < 2.0
    moderate = "<!DOCTYPE html><html><body>" + "<div>" * 2000 + "deep text" + "</div>" * 2000
    assert SLIM.apply(moderate, CTX) == "deep text"
    # Legacy pages leave thousands of <a name>, <font>, <p>, <li> open: the parser closes those.
    legacy = "<html><body>" + '<p><a name="x"><font size=2><b>Old news item</b><li>entry' * 20_000
    assert SLIM.apply(legacy, CTX).startswith("Old news item\n- entry\nOld news item")


# -- the metric helper --------------------------------------------------------------------


def _lcs_dp(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def test_lcs_matches_dynamic_programming() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcde") for _ in range(rng.randint(0, 70))]
        b = [rng.choice("abcdef") for _ in range(rng.randint(0, 70))]
        assert lcs_length(a, b) == _lcs_dp(a, b)


def test_words_normalisation() -> None:
    assert words("Hello, WORLD&amp;co — it's 3.5!") == ["hello", "world", "co", "it", "s", "3", "5"]
    assert words("中文[链接](http://x)文字　end") == ["中", "文", "链", "接", "http", "x", "文", "字", "end"]
    assert visible_text("<p>a</p><p>b<script>c</script></p>").split() == ["a", "b"]
    assert retention(["a", "b", "c", "d"], ["x", "a", "c", "d"]) == 0.75
    assert retention([], ["x"]) == 1.0


# -- the real pages -----------------------------------------------------------------------


def _corpus() -> list[Path]:
    root = shared_path("html", "readability")
    pages = sorted(d for d in root.iterdir() if (d / "source.html").is_file())
    if not pages:
        pytest.skip(f"no pages under {root}")
    return pages


def test_readability_corpus() -> None:
    """Median output <= 10% of the source; median >= 98% of the article's words, in order."""
    slim = HtmlSlimming()
    sizes: list[float] = []
    kept: list[float] = []
    for d in _corpus():
        src = (d / "source.html").read_text(encoding="utf-8", errors="surrogateescape")
        expected = (d / "expected.html").read_text(encoding="utf-8", errors="surrogateescape")
        out = slim.apply(src, CTX)
        assert isinstance(out, str)
        assert slim.apply(src, CTX) == out, d.name
        if len(src) >= slim.min_chars:
            assert out is not src, f"{d.name}: page not slimmed"
        sizes.append(len(out) / len(src))
        kept.append(retention(words(visible_text(expected)), words(out)))
    assert len(sizes) == 130
    assert statistics.median(sizes) <= 0.10, statistics.median(sizes)
    assert statistics.median(kept) >= 0.98, statistics.median(kept)
