"""html_slimming: turn a fetched web page into the compact text a reader would see.

A raw page is mostly markup, scripts, styles, attributes and site chrome; the model
needs the words. This pass parses the page once (selectolax / lexbor, in C), drops
what no reader sees (scripts, styles, hidden elements, comments, attributes) and the
obvious site chrome (navigation, footers, share bars, ads, cookie banners), and
renders the rest as markdown-ish text: the title, `#` headings, paragraphs, `- ` list
items, table rows as `a | b | c`, and ``` fenced pre blocks kept verbatim.

It is pure and deterministic, and it never raises: anything that is not HTML, is too
small to be worth it, is too big to parse safely, or fails in any way comes back
unchanged (the very same object), and so does an output that would not be smaller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from selectolax.lexbor import LexborHTMLParser

from .base import MARKUP, PassContext
from .html_render import CUT_MARK, INLINE_TAGS, Renderer, page_urls
from .page_text import PageText
from .truncate import tool_family

__all__ = ["HtmlSlimming", "looks_like_html"]

# File tools: reading or editing an .html file must show the file as it is.
_FILE_TOOLS = frozenset(
    (
        "read file_read read_file read_text_file view cat write edit write_file edit_file "
        "multiedit apply_patch str_replace_editor str_replace_based_edit_tool notebookread"
    ).split()
)
_SNIFF_CHARS = 4096
_DOC_START = re.compile(
    r"\A\ufeff?\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)\b", re.I | re.S
)
_MIN_FRAGMENT_TAGS = 8
# The HTML tree builder rescans the stack of open elements at each block start, so parse time
# grows with the sum of nesting depths: 20,000 unclosed <div>s (100 KB) take a second, 100,000
# take half a minute. Real pages score under 10^5 (Wikipedia's biggest: 5*10^4); past this
# budget (about 0.1 s of parsing) the page is left alone. Only containers count: the parser
# closes p/li/h1 and a/b/font by itself, so legacy pages full of unclosed ones are not deep.
_NEST_NAMES = (
    "div span ul ol dl section article aside nav header footer main blockquote table form center"
).split()
_NEST_ALT = "|".join(_NEST_NAMES + [n.upper() for n in _NEST_NAMES])
_NEST_TAG = re.compile(rf"<(/?)(?:{_NEST_ALT})[\s>/]")
_MAX_NESTING_WORK = 20_000_000
_KNOWN_TAG = re.compile(
    r"</?(?:p|div|span|a|br|table|tr|td|th|ul|ol|li|h[1-6]|section|article|main|nav|"
    r"header|footer|meta|link|script|style|title|img|form|input|button|strong|em|b|i|pre|code|"
    r"blockquote|figure|iframe|noscript|label|select|option|dl|dt|dd|hr|small|sup|sub)\b[^<>]*>",
    re.I,
)

# Hidden for everyone: dropped unless it holds the article (a page hidden until a script shows it).
_HIDDEN_SELECTOR = (
    "[hidden], [style*='display:none' i], [style*='display: none' i], "
    "[style*='visibility:hidden' i], [style*='visibility: hidden' i], [type='hidden' i]"
)
# Hidden from screen readers only, and put on the whole page while a modal is open: guarded by size.
_ARIA_HIDDEN_SELECTOR = "[aria-hidden='true' i]"
# Chrome by element or ARIA role: navigation, footers, asides, forms, dialogs.
_CHROME_TAG_SELECTOR = (
    "nav, footer, aside, form, dialog, menu, [role='navigation' i], [role='contentinfo' i], "
    "[role='complementary' i], [role='search' i], [role='dialog' i], [role='alertdialog' i], "
    "[role='menu' i], [role='menubar' i]"
)
# What a cut says it was, so the agent can tell whether to recall it.
_TAG_KINDS = {
    "nav": "navigation",
    "footer": "footer",
    "aside": "sidebar",
    "form": "form",
    "dialog": "dialog",
    "menu": "menu",
}
_ROLE_KINDS = {
    "navigation": "navigation",
    "contentinfo": "footer",
    "complementary": "sidebar",
    "search": "search form",
    "dialog": "dialog",
    "alertdialog": "dialog",
    "menu": "menu",
    "menubar": "menu",
}
_CHROME_TAGS = frozenset(_TAG_KINDS)
_CHROME_ROLES = frozenset(_ROLE_KINDS)
# The first stem a matched class/id word starts with names its kind.
_NAME_KINDS = (
    ("shar", "share buttons"),
    ("social", "share buttons"),
    ("advert", "ads"),
    ("ad", "ads"),
    ("sponsor", "ads"),
    ("promo", "promotions"),
    ("outbrain", "recommended links"),
    ("taboola", "recommended links"),
    ("most", "recommended links"),
    ("trending", "recommended links"),
    ("popular", "recommended links"),
    ("recommend", "recommended links"),
    ("related", "related links"),
    ("sidebar", "sidebar"),
    ("breadcrumb", "breadcrumbs"),
    ("cookie", "cookie notice"),
    ("gdpr", "cookie notice"),
    ("consent", "cookie notice"),
    ("newsletter", "newsletter sign-up"),
    ("subscribe", "newsletter sign-up"),
    ("comment", "comment form"),
    ("respond", "comment form"),
    ("reply", "comment form"),
    ("popup", "pop-up"),
    ("modal", "pop-up"),
    ("skip", "skip links"),
    ("nav", "navigation"),
    ("topnav", "navigation"),
    ("subnav", "navigation"),
    ("menu", "menu"),
)
# Chrome by class/id. The CSS pre-filter (substring, in C) finds candidates; _CHROME_NAME decides.
# Every word _CHROME_NAME can match contains one of these.
_CHROME_WORDS = (
    "shar social advert sponsor promo related sidebar menu breadcrumb cookie consent gdpr "
    "newsletter subscribe popup modal commentform comment-form reply-form respond skip "
    "hid invisible d-none sr-only screen-reader nav popular trending recommend outbrain taboola "
    "mostread most-read"
).split()
_CHROME_ATTR_SELECTOR = ", ".join(
    [f"[{attr}*='{w}' i]" for w in _CHROME_WORDS for attr in ("class", "id")]
    + [f"[{attr}~='{w}' i]" for w in ("ad", "ads", "adv") for attr in ("class", "id")]
)
# Distinctive words match anywhere (camelCase ids like "shareButtons"); ambiguous ones only as
# whole dash/underscore-separated tokens ("ad" never inside "head"). Comments themselves are
# content (readers and Readability keep them); only the form to write one is chrome.
_CHROME_NAME = re.compile(
    r"share|sharing|social|advert|sponsor|sidebar|breadcrumb|cookie|gdpr|newsletter|commentform"
    r"|navigation|navbar|topnav|subnav|outbrain|taboola|most-?read|most-?popular|trending"
    r"|(?:^|[\s_-])(?:promo|promos|promoted|related|menu|consent|subscribe|popup|modal|skip"
    r"|ad|ads|adv|comment-?form|comments?-respond|respond|reply-form|nav|navi|recommended|popular"
    r")(?:$|[\s_-])",
    re.I,
)
# Classes like "hidden"/"visually-hidden" hide an element from sighted readers as style= does
# (inline elements too); "hide-for-small" and the like are conditional and do not count.
_HIDDEN_CLASS = re.compile(
    r"(?:^|\s)(?:hidden|hide|invisible|is-hidden|u-hidden|d-none|element-invisible|visually-hidden"
    r"|u-visually-hidden|sr-only|screen-reader-text)(?:$|\s)",
    re.I,
)
# "hidden md:block" (Tailwind), "d-none d-lg-flex" (Bootstrap): hidden on phones, shown on desktops.
_SHOWN_AT_WIDTH = re.compile(
    r"(?:^|\s)(?:(?:sm|md|lg|xl|2xl):|d-(?:sm|md|lg|xl|xxl)-)(?:block|flex|grid|inline|table|contents)", re.I
)
# Ids are often slugs of a heading ("sharing-with-a-single-developer"): only short ones count.
_ID_MAX_TOKENS = 3
_ID_SPLIT = re.compile(r"[\s_-]+")
# The element that holds the article, when the page says so; chrome may not contain it.
_MAIN_SELECTOR = "main, [role='main' i], [itemprop='articleBody' i]"
_MAX_ARTICLES = 64
_MAX_PARAGRAPHS = 5000
_CHROME_SELECTOR = _CHROME_TAG_SELECTOR + ", " + _CHROME_ATTR_SELECTOR
# Removed from the tree before anything is measured (the walk skips all of _INVISIBLE_TAGS).
_INVISIBLE_SELECTOR = "script, style, noscript, template, svg, iframe, object, embed, canvas"

_WS = re.compile(r"\s+")


def looks_like_html(text: str) -> bool:
    """Cheap sniff of the first few KB: a document start, or several known tags.

    Plain text, JSON and source code that merely contains `<` (or a stray `<b>`) say no,
    so the pass never mangles output that only mentions markup.
    """
    head = text[:_SNIFF_CHARS]
    if _DOC_START.match(head):
        return True
    # A fragment ("<div>...</div>") must start with markup and carry several real tags;
    # JSON, code (JSX too: it starts with imports) and prose start with something else.
    if not _KNOWN_TAG.match(head.lstrip("\ufeff \t\r\n")):
        return False  # not starting with an HTML tag (an XML feed, an SVG file, text, code)
    return len(_KNOWN_TAG.findall(head)) >= _MIN_FRAGMENT_TAGS


@dataclass(frozen=True, slots=True)
class HtmlSlimming:
    """Render an HTML page as compact text; see the module docstring.

    Every setting changes the output; the defaults are tuned on the 130 Readability pages.
    """

    name: ClassVar[str] = "html_slimming"
    accepts: ClassVar[frozenset[str]] = frozenset({MARKUP})

    min_chars: int = 512
    """Shorter inputs come back unchanged: a small fragment costs few tokens, and its markup
    may be exactly what the caller asked for."""
    max_input_chars: int = 8_000_000
    """Longer inputs come back unchanged, bounding time and memory; truncation handles them."""
    skip_tools: frozenset[str] = _FILE_TOOLS
    """Tools (names or families, lower-case) whose output is never slimmed: an agent that reads
    or edits an .html file needs its markup, not a rendering of it."""
    keep_links: bool = True
    """Render useful links as `[text](href)` so the model can follow them. Useful: an http(s)
    URL (relative hrefs only when `<base href>` says what they are relative to), not a link to
    the page itself, not `javascript:`/`mailto:`/`#`, text that is not just the URL, and the
    first link to that URL on the page (later ones are plain text). Tracking parameters
    (utm_*, fbclid, ...) are removed, and links to the page's own site (known from `<base>`,
    the canonical link or og:url) are written as `/path`."""
    list_links: bool = True
    """With `keep_links`, list the links after the page's text (`- label: URL` lines, one
    marked cut the agent recalls when it wants to follow one) instead of writing them
    inline: a URL inside a sentence splits it for the reader and costs more tokens than
    the words around it."""
    max_href_chars: int = 200
    """Links with longer hrefs (redirectors, data blobs) keep only their text."""
    drop_chrome: bool = True
    """Drop navigation, footers, asides, forms, dialogs, and elements whose class/id says
    share/social/ad/promo/related/sidebar/menu/breadcrumb/cookie/newsletter/comment-form/
    hidden. Comments themselves are content and stay."""
    chrome_max_share: float = 0.5
    """A chrome (or aria-hidden) element holding more than this share of the page's visible
    text is kept, and so is anything that contains the page's `<main>` or its largest
    `<article>`: real chrome is small, and losing the article is the worst outcome."""
    keep_title: bool = True
    """Start with the document `<title>` as `# title`, unless the page's `<h1>` already says it."""

    def apply(self, text: str, ctx: PassContext) -> str:
        """The slimmed page (cuts marked in place, see `page_text`), or `text` itself when
        the pass does not apply or fails."""
        slimmed = self.slim(text, ctx)
        return text if slimmed is None else slimmed[0]

    def slim(self, text: str, ctx: PassContext, limit: int | None = None) -> tuple[str, str | None] | None:
        """`PageText.shown(limit)` of the page: what the agent reads and the page text its
        markers name (None when nothing is cut); None when the pass does not apply, fails,
        or what it shows is not shorter than `text`."""
        page = self.page(text, ctx)
        if page is None:
            return None
        try:
            shown = page.shown(limit)
        except Exception:  # noqa: BLE001 - a reduction must never break a tool result
            return None
        if not shown[0] or len(shown[0]) >= len(text):
            return None
        return shown

    def page(self, text: str, ctx: PassContext) -> PageText | None:
        """The page as text, every line with why it is cut (see `PageText`), or None when
        the pass does not apply or fails."""
        try:
            if not isinstance(text, str) or len(text) < self.min_chars or len(text) > self.max_input_chars:
                return None
            if self.skip_tools and ctx.tool_name:
                tool = ctx.tool_name.strip().lower().replace("-", "_")
                if tool in self.skip_tools or tool_family(tool) in self.skip_tools:
                    return None
            if not looks_like_html(text) or _nesting_work(text) > _MAX_NESTING_WORK:
                return None
            return self._render(text)
        except Exception:  # noqa: BLE001 - a reduction must never break a tool result
            return None

    # -- internals ---------------------------------------------------------------------

    def _render(self, text: str) -> PageText | None:
        try:
            tree = LexborHTMLParser(text)
        except UnicodeEncodeError:
            # Lone surrogates (bytes decoded with surrogateescape): give lexbor the original
            # bytes back; it replaces invalid UTF-8 the way a browser does.
            tree = LexborHTMLParser(text.encode("utf-8", "surrogateescape"))
        title = ""
        base = page = ""
        head = tree.head
        if head is not None:
            if self.keep_title:
                t = head.css_first("title")
                if t is not None:
                    title = _WS.sub(" ", t.text(deep=True)).strip()
            if self.keep_links:
                base, page = page_urls(head)
        body = tree.body
        if body is None:
            return None
        # Remove what no reader sees first, so the text sizes below measure visible text.
        for node in body.css(_INVISIBLE_SELECTOR):
            node.decompose()
        guard = _Guard(body)
        guard.drop(body.css(_HIDDEN_SELECTOR), named=False, sized=False, why="hidden")
        guard.measure(body, self.chrome_max_share)
        guard.drop(body.css(_ARIA_HIDDEN_SELECTOR), named=False, sized=True, why="hidden")
        if self.drop_chrome:
            guard.drop(body.css(_CHROME_SELECTOR), named=True, sized=True, why="")
        if title:
            # "Headline | Site" says nothing the page's own <h1> does not, once the h1 is shown.
            h1 = body.css_first("h1")
            h1_text = _WS.sub(" ", h1.text(deep=True)).strip().lower() if h1 is not None else ""
            if h1_text and h1_text in title.lower():
                title = ""
        renderer = Renderer(self.keep_links, self.max_href_chars, base, page, guard.cuts, self.list_links)
        lines = renderer.run(body)
        reasons = renderer.reasons
        if title and (not lines or lines[0] != "# " + title):
            lines.insert(0, "# " + title)
            reasons.insert(0, None)
        return PageText(tuple(lines), tuple(reasons))


class _Guard:
    """Removes hidden and chrome elements, but never the article.

    Kept: whatever contains the page's `<main>` (or role=main, itemprop=articleBody) or its
    largest `<article>`; for chrome and aria-hidden also whatever contains the element whose
    paragraphs hold the most text, or holds more than `max_share` of the visible text.
    Chrome is small, and a wrapper that happens to be called "sidebar-layout" or to carry
    `aria-hidden` while a modal is open may hold the whole page.
    """

    __slots__ = ("body_id", "keep_ids", "limit", "budget", "cuts")

    def __init__(self, body) -> None:  # noqa: ANN001 - a LexborNode
        self.body_id = body.mem_id
        self.keep_ids: set[int] = set()  # the article holders and all their ancestors
        self.limit = 0.0
        self.budget = 4 * len(body.text(deep=True)) + 100_000  # bounds work on nested candidates
        self.cuts: list[tuple[object, str]] = []  # (detached element, why), see html_render.CUT_MARK
        holders = body.css(_MAIN_SELECTOR)
        # Cards in a "related" rail are <article>s too: protect only the one with the most text.
        articles = body.css("article")[:_MAX_ARTICLES]
        if articles:
            holders.append(max(articles, key=lambda a: len(a.text(deep=True))))
        self._protect(holders)

    def measure(self, body, max_share: float) -> None:  # noqa: ANN001 - a LexborNode
        """Once hidden elements are gone: protect the densest paragraph holder, set the share limit."""
        # Readability's idea in one line: the parent whose <p>s hold the most text is the
        # article, whatever its class says ("post-widget", "content-with-sidebar").
        para_text: dict[int, int] = {}
        parents = {}
        for p in body.css("p")[:_MAX_PARAGRAPHS]:
            parent = p.parent
            if parent is not None:
                key = parent.mem_id
                para_text[key] = para_text.get(key, 0) + len(p.text(deep=True))
                parents[key] = parent
        if para_text:
            self._protect([parents[max(para_text, key=para_text.__getitem__)]])
        self.limit = max_share * len(body.text(deep=True))

    def _protect(self, holders: list) -> None:
        for holder in holders:
            n = holder
            while n is not None and n.mem_id not in self.keep_ids:
                self.keep_ids.add(n.mem_id)
                n = n.parent

    def drop(self, candidates: list, named: bool, sized: bool, why: str) -> None:
        """Take each candidate that passes the guard out of the page, leaving a mark where it
        stood (the renderer shows its lines there as cut, with `why`, or the chrome's kind).

        `named`: candidates come from a loose pre-filter; check tag/role/class/id first.
        `sized`: also keep a candidate that holds more than the share of the page's text.
        """
        for node in candidates:
            if node.mem_id in self.keep_ids:
                continue
            tag = node.tag
            if tag in ("body", "html"):
                continue
            kind = _chrome_kind(node, tag) if named else why
            if not kind:
                continue
            if self.budget <= 0:
                return  # pathological nesting: keep the rest rather than spend unbounded time
            # Skip nodes already removed with an ancestor (their chain no longer reaches <body>).
            n = node.parent
            steps = 0
            while n is not None and n.mem_id != self.body_id:
                n = n.parent
                steps += 1
            self.budget -= 16 * steps
            if n is None:
                continue
            if sized:
                size = len(node.text(deep=True))
                self.budget -= size
                if size > self.limit:
                    continue
            node.replace_with(f"{CUT_MARK}{len(self.cuts)}")
            self.cuts.append((node, kind))


def _chrome_kind(node, tag: str) -> str:  # noqa: ANN001 - a LexborNode
    """What kind of chrome the element is, in words ("navigation", "share buttons"), by tag,
    ARIA role, or a class/id word (see _CHROME_NAME); "" when it is not chrome."""
    if tag in _CHROME_TAGS:
        return _TAG_KINDS[tag]
    attrs = node.attributes
    role = (attrs.get("role") or "").strip().lower()
    if role in _CHROME_ROLES:
        return _ROLE_KINDS[role]
    cls = attrs.get("class") or ""
    if _HIDDEN_CLASS.search(cls) and not _SHOWN_AT_WIDTH.search(cls):
        return "hidden"
    if tag in INLINE_TAGS:
        return ""
    ident = attrs.get("id") or ""
    if ident and len(_ID_SPLIT.split(ident.strip())) <= _ID_MAX_TOKENS:
        cls = f"{cls} {ident}"
    m = _CHROME_NAME.search(cls)
    if m is None:
        return ""
    word = m[0].strip(" \t_-").lower()
    return next((kind for stem, kind in _NAME_KINDS if word.startswith(stem)), "site chrome")


def _nesting_work(text: str) -> int:
    """Sum over opening tags of their nesting depth: a linear-time bound on the parse's cost."""
    depth = work = 0
    for slash in _NEST_TAG.findall(text):
        if slash:
            if depth:
                depth -= 1
        else:
            depth += 1
            work += depth
    return work
