"""How well an HTML reduction keeps a page's article: word retention by exact LCS.

Shared by `tests/test_pass_html.py` and `benchmarks/bench_html.py` (which puts
`tests/` on `sys.path`), so the test and the benchmark measure the same thing.

Retention = LCS(words of the reference text, words of the output) / len(reference words):
the share of the reference's words that survive *in order*. Words are compared after
HTML-unescaping and lowercasing, as runs of letters/digits; CJK characters count one
word each, because those scripts do not separate words with spaces and a link in the
middle of a sentence must not turn one long "word" into three unmatched ones.
"""

from __future__ import annotations

import html
import re

from selectolax.lexbor import LexborHTMLParser

_CJK = "\u2e80-\u2fff\u3040-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
_WORD = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
# Block-level opening/closing tags: a space before them keeps "<p>a</p><p>b</p>" two words.
_BLOCK_TAG = re.compile(
    r"(<(?:/?)(?:p|div|br|li|ul|ol|h[1-6]|td|th|tr|table|section|article|blockquote|pre|"
    r"figure|figcaption|dt|dd|hr|header|footer|main|aside|nav)\b)",
    re.IGNORECASE,
)


def words(text: str) -> list[str]:
    """Normalised words of plain text (unescaped, lowercased, punctuation dropped)."""
    return _WORD.findall(html.unescape(text).lower())


def visible_text(markup: str) -> str:
    """The text a reader sees in `markup`, with blocks separated by whitespace."""
    tree = LexborHTMLParser(_BLOCK_TAG.sub(r" \1", markup))
    tree.strip_tags(["script", "style", "noscript", "template"])
    root = tree.body if tree.body is not None else tree.root
    return root.text(deep=True) if root is not None else ""


def lcs_length(a: list[str], b: list[str]) -> int:
    """Exact length of the longest common subsequence of two word lists.

    Bit-parallel (Allison-Dix / Hyyrö): one pass over `b`, a few big-int operations
    on a len(a)-bit vector per word, so tens of thousands of words take milliseconds
    where a quadratic table would take minutes.
    """
    m = len(a)
    if m == 0 or not b:
        return 0
    masks: dict[str, int] = {}
    for i, w in enumerate(a):
        masks[w] = masks.get(w, 0) | (1 << i)
    full = (1 << m) - 1
    v = full
    get = masks.get
    for w in b:
        pm = get(w)
        if pm is None:
            continue
        u = v & pm
        v = ((v + u) | (v - u)) & full
    return m - v.bit_count()


def retention(reference_words: list[str], output_words: list[str]) -> float:
    """Share of the reference words kept in order by the output (1.0 for an empty reference)."""
    if not reference_words:
        return 1.0
    return lcs_length(reference_words, output_words) / len(reference_words)


def grams_kept(reference: str, output: str) -> float:
    """Share of the reference text's word 4-grams the output still has, in order (exact LCS
    over 4-grams): a word lost or a link spelled out mid-sentence breaks the 4-grams around it,
    a change of layout does not. 1.0 for a reference of under four words."""
    ref = _grams(words(reference))
    if not ref:
        return 1.0
    return lcs_length(ref, _grams(words(output))) / len(ref)


def _grams(ws: list[str]) -> list[str]:
    return [" ".join(ws[i : i + 4]) for i in range(max(0, len(ws) - 3))]
