"""How html_slimming writes a page: one walk of <body> to markdown-ish lines, with links
made absolute against the page's own URL and stripped of tracking parameters.

Kept apart from `html.py`, which decides whether and what to slim (sniffing, the nesting
bound, hidden elements and site chrome); this module only renders what is left.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

# Whole subtrees no reader sees. (<head> is skipped by walking only <body>; its <title> is read first.)
_INVISIBLE_TAGS = frozenset(
    (
        "script style noscript template svg iframe object embed canvas video audio map head title "
        "meta link base select option datalist textarea input img picture source frameset "
        "frame"
    ).split()
)
_HEADINGS = {"h1": "# ", "h2": "## ", "h3": "### ", "h4": "#### ", "h5": "##### ", "h6": "###### "}
_BLOCK_TAGS = frozenset(
    (
        "p div section article main header footer nav aside ul ol dl dt dd table thead tbody "
        "tfoot caption blockquote figure figcaption address details summary center hgroup "
        "fieldset legend body html hr br form dialog menu li tr td th pre h1 h2 h3 h4 h5 h6"
    ).split()
)
_MAX_TABLE_CHECKS = 256
# Inside a cell of a layout table these mean "this table is page layout, not data".
_LAYOUT_CELL_SELECTOR = ", ".join(
    f"{cell} {inner}"
    for cell in ("td", "th")
    for inner in ("table", "p", "ul", "ol", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6")
)
_SPACE = re.compile(r"\s")
_SCHEME = re.compile(r"^https?://", re.I)
_ORIGIN = re.compile(r"^https?://[^/?#\s]+", re.I)
_TRACKING_IN_URL = re.compile(
    r"[?&](?:utm_|fbclid|gclid|mc_[ce]id|_ga=|_gl=|ncid|cmpid|ref_src|igshid|mkt_tok)", re.I
)
_TRACKING = re.compile(
    r"utm_|fbclid$|gclid$|mc_[ce]id$|_ga$|_gl$|ncid$|cmpid$|ref_src$|igshid$|mkt_tok$", re.I
)
_EXIT = object()
# The reason the listed links of a page carry (see `Renderer.listed`).
LINKS = "links"
# A text node that stands for a cut element: NUL never survives parsing into page text.
CUT_MARK = "\x00"
# Never dropped for their class/id: inline text ("<a class=popup>Prefer</a>" sits mid-sentence).
INLINE_TAGS = frozenset(
    (
        "a span em strong b i u s small abbr cite code sup sub mark q font time label var kbd "
        "samp del ins dfn bdi bdo"
    ).split()
)
# A hidden inline element shorter than this ("(opens in a new tab)") stays in its sentence:
# a marker would be longer than what it stands for.
INLINE_CUT_CHARS = 200
_CUT_IN_TEXT = re.compile("\x00(\\d+)")


class Renderer:
    """One depth-first walk of <body> that emits lines of markdown-ish text.

    Iterative (an explicit stack, with exit markers), so a page nested 100,000 deep cannot
    hit Python's recursion limit. Inline text gathers in `buf`; a block boundary flushes
    it as one whitespace-collapsed line.
    """

    __slots__ = (
        "keep_links",
        "max_href",
        "base",
        "page",
        "origin",
        "lines",
        "buf",
        "prefix",
        "inline_depth",
        "headings",
        "cells",
        "tables",
        "table_checks",
        "seen_hrefs",
        "flushes",
        "cuts",
        "cutting",
        "reasons",
        "listed",
    )

    def __init__(
        self,
        keep_links: bool,
        max_href: int,
        base: str,
        page: str,
        cuts: list[tuple[object, str]] | None = None,
        list_links: bool = False,
    ) -> None:
        self.keep_links = keep_links
        self.max_href = max_href
        self.base = base  # what relative hrefs resolve against (<base href>), or ""
        self.page = page.split("#", 1)[0]  # the page's own URL (base, canonical, og:url), or ""
        self.origin = _origin(page)  # links to it are written as "/path"
        self.lines: list[str] = []
        self.buf: list[str] = []
        self.prefix = ""  # "# " / "- " for the next line emitted
        self.inline_depth = 0  # >0 inside a heading or data cell: blocks become spaces
        self.headings = 0  # open headings
        self.cells: list[list[str]] = []  # one list per open data-table row
        self.tables: list[bool] = []  # per open table: is it a data table (rows as "a | b")?
        self.table_checks = 0
        self.seen_hrefs: set[str] = set()  # a URL is spelled out once; later links are plain text
        self.flushes = 0  # how many times `buf` was emptied: a link spanning one loses its markup
        # Elements taken out of the page (hidden, chrome): (the detached node, why), each
        # standing in the tree as a text node CUT_MARK + its index. Their lines are rendered
        # in place like any other, each with the reason it is cut in `reasons` (None: kept).
        self.cuts = cuts or []
        self.cutting: str | None = None
        self.reasons: list[str | None] = []
        # With `list_links`, the shown text's links as "- label: URL" lines for the end of
        # the page (None: written inline as [label](URL)).
        self.listed: list[str] | None = [] if list_links else None

    def emit(self, line: str) -> None:
        """Append a finished line (with any pending prefix). A repeat stays: a page that
        says a thing twice says it twice, and a dropped line would be lost unmarked."""
        self.lines.append(self.prefix + line)
        self.prefix = ""
        self.reasons.append(self.cutting)

    def flush(self) -> None:
        buf = self.buf
        if not buf:
            return
        if self.inline_depth:
            buf.append(" ")
            return
        line = " ".join("".join(buf).split())
        buf.clear()
        self.flushes += 1
        if line:
            self.emit(line)

    def run(self, body) -> list[str]:  # noqa: ANN001 - a LexborNode
        stack: list = [body]
        push = stack.append
        pop = stack.pop
        buf = self.buf
        while stack:
            item = pop()
            if item is _EXIT:
                kind, data = pop()
                self._exit(kind, data)
                continue
            node = item
            tag = node.tag
            if tag == "-text":
                t = node.text_content
                if t and t[0] == CUT_MARK:
                    self._enter_cut(t, push)
                elif t:
                    buf.append(t)
                continue
            if tag is None or tag[0] == "-" or tag in _INVISIBLE_TAGS:
                continue  # comments, doctype, invisible subtrees
            if tag == "button" and not self.headings:
                continue  # controls ("Close", "Share") are chrome; an accordion heading is not
            if tag in _BLOCK_TAGS:
                self.flush()
                if tag == "br" or tag == "hr":
                    continue
                if tag == "pre":
                    if self.inline_depth:
                        buf.append(_CUT_IN_TEXT.sub(self._cut_text, node.text(deep=True)))
                    else:
                        self._pre(node.text(deep=True))
                    continue
                kind = "block"
                data = None
                if self.inline_depth:
                    pass  # inside a heading or data cell: any block is just a space
                elif tag in _HEADINGS:
                    self.prefix = _HEADINGS[tag]
                    self.inline_depth += 1
                    self.headings += 1
                    kind = "heading"
                elif tag == "li" or tag == "dt":
                    self.prefix = "- "
                    kind = "item"
                elif tag == "table":
                    self.tables.append(self._is_data_table(node))
                    kind = "table"
                elif tag == "tr":
                    if self.tables and self.tables[-1]:
                        kind = "row"
                        self.cells.append([])
                elif tag == "td" or tag == "th":
                    if self.cells:
                        kind = "cell"
                        data = len(buf)
                        self.inline_depth += 1
                push((kind, data))
                push(_EXIT)
            elif tag == "a" and self.keep_links:
                href = self._href(node)
                if href:
                    push(("link", (len(buf), self.flushes, href)))
                    push(_EXIT)
            c = node.last_child  # pushed last to first, so popped in document order
            while c is not None:
                push(c)
                c = c.prev
        self.flush()
        if self.listed:
            self.cutting = LINKS
            for row in self.listed:
                self.emit(row)
            self.cutting = None
        return self.lines

    def _enter_cut(self, mark: str, push) -> None:  # noqa: ANN001
        """Walk a cut element where it stood: its lines carry its reason. A small inline one
        (a screen-reader label inside a sentence) stays part of its line, as text."""
        try:
            node, reason = self.cuts[int(mark[1:])]
        except (ValueError, IndexError):
            return
        if self.cutting is None and node.tag in INLINE_TAGS and len(node.text(deep=True)) < INLINE_CUT_CHARS:
            push(node)
            return
        if self.cutting is None:
            self.flush()
        push(("cut", self.cutting))
        push(_EXIT)
        push(node)
        if self.cutting is None:
            self.cutting = reason

    def _cut_text(self, m: re.Match[str]) -> str:
        try:
            return self.cuts[int(m[1])][0].text(deep=True)
        except (ValueError, IndexError):
            return ""

    def _is_data_table(self, node) -> bool:  # noqa: ANN001 - a LexborNode
        """Data tables render as "a | b" rows; layout tables (blocks in cells) as blocks."""
        self.table_checks += 1
        if self.table_checks > _MAX_TABLE_CHECKS:
            return False  # each check scans the subtree: bound the work on table soup
        # Query the table's children, not the table: a selector matches the node it runs on,
        # and a data table nested in a layout cell would match "td table" itself.
        return all(child.css_first(_LAYOUT_CELL_SELECTOR) is None for child in node.iter())

    def _exit(self, kind: str, data) -> None:  # noqa: ANN001
        if kind == "cut":
            if data is None:
                self.flush()
                self.prefix = ""
            self.cutting = data
        elif kind == "block":
            self.flush()
        elif kind == "item" or kind == "heading":
            if kind == "heading":
                self.inline_depth -= 1
                self.headings -= 1
            self.flush()
            self.prefix = ""  # an empty item or heading must not mark the next line
        elif kind == "link":
            start, flushes, href = data
            buf = self.buf
            if flushes != self.flushes:
                return  # a block broke the link's text into lines: keep it as plain text
            raw = "".join(buf[start:])
            label = " ".join(raw.split())
            seen = self.seen_hrefs
            key = href if self.cutting is None else "\x00" + href  # a cut link spells its URL too
            if not label or key in seen:
                return
            if _SCHEME.sub("", label).rstrip("/") == _SCHEME.sub("", href).rstrip("/"):
                return  # the text already is the URL
            seen.add(key)
            origin = self.origin
            if origin and href[: len(origin) + 1].lower() == origin + "/":
                href = href[len(origin) :]  # same site as the page: "/path" is enough
            if self.listed is not None and self.cutting is None:
                self.listed.append(f"- {label}: {href}")  # the sentence stays as it reads
                return
            del buf[start:]
            lead = " " if raw[:1].isspace() else ""
            trail = " " if raw[-1:].isspace() else ""
            buf.append(f"{lead}[{label}]({href}){trail}")
        elif kind == "cell":
            buf = self.buf
            cell = " ".join("".join(buf[data:]).split())
            del buf[data:]
            self.inline_depth -= 1
            if self.cells:
                self.cells[-1].append(cell)
        elif kind == "row":
            cells = self.cells.pop() if self.cells else []
            self.flush()
            if any(cells):
                self.emit(" | ".join(cells))
        elif kind == "table":
            if self.tables:
                self.tables.pop()
            self.flush()

    def _href(self, node) -> str:  # noqa: ANN001
        href = node.attributes.get("href")
        if not href:
            return ""
        href = href.strip()
        low = href[:8].lower()
        if low.startswith("//"):  # protocol-relative: the page's scheme, else https
            href = (self.page or self.base or "https:").split("//", 1)[0] + href
        elif not low.startswith(("http://", "https://")):
            if not self.base or low.startswith(("#", "javascript", "mailto:", "data:", "tel:")):
                return ""
            try:
                href = urljoin(self.base, href)
            except ValueError:
                return ""
        if "?" in href and _TRACKING_IN_URL.search(href):
            href = _strip_tracking(href)
        if len(href) > self.max_href or _SPACE.search(href) is not None:
            return ""
        if self.page and href.split("#", 1)[0] == self.page:
            return ""  # a link to the page itself says nothing new
        return href

    def _pre(self, raw: str) -> None:
        if CUT_MARK in raw:  # a cut element inside preformatted text: verbatim, like the rest
            raw = _CUT_IN_TEXT.sub(self._cut_text, raw)
        body = raw.strip("\n")
        if not body.strip():
            return
        self.prefix = ""
        self.lines.append("```\n" + "\n".join(line.rstrip() for line in body.split("\n")) + "\n```")
        self.reasons.append(self.cutting)


def page_urls(head) -> tuple[str, str]:  # noqa: ANN001 - a LexborNode
    """(<base href>, the page's own URL) from <head>; "" where the page does not say (absolute only)."""
    base = page = ""
    for selector, attr in (
        ("base[href]", "href"),
        ("link[rel='canonical' i][href]", "href"),
        ("meta[property='og:url' i][content]", "content"),
    ):
        node = head.css_first(selector)
        if node is None:
            continue
        url = (node.attributes.get(attr) or "").strip()
        if not _SCHEME.match(url) or _SPACE.search(url) is not None:
            continue
        if selector.startswith("base"):
            base = url
        if not page:
            page = url
    return base, page


def _origin(url: str) -> str:
    """The "scheme://host[:port]" of an absolute URL, lowercased; "" if it has none."""
    m = _ORIGIN.match(url)
    return m.group(0).lower() if m else ""


def _strip_tracking(href: str) -> str:
    """`href` without analytics parameters (utm_*, fbclid, ...): they cost tokens, mean nothing."""
    try:
        parts = urlsplit(href)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _TRACKING.match(k)]
        return urlunsplit(parts._replace(query=urlencode(query, safe=":/@,")))
    except ValueError:
        return href
