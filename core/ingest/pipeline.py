"""The passes a `Config` enables, and the frozen form a message gets at ingestion.

Split from `ingest` (the gate's decisions) so that the gate for tool results and the
one for the agent's and the user's own messages (`ingest_intent`) share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import CONTENT_PASSES, PASS_ORDER, Config
from ..passes.base import MARKUP, PassContext, ReductionPass
from ..passes.diff_folding import DiffFolding
from ..passes.folding import is_code_read
from ..passes.format_cleaning import FormatCleaning
from ..passes.format_slimming import FormatSlimming
from ..passes.html import HtmlSlimming
from ..passes.images import ImageDownsample
from ..passes.json_arrays import JsonArrays
from ..passes.json_minify import JsonMinify
from ..passes.kinds import content_kind
from ..passes.line_numbers import LineNumberStrip
from ..passes.log_folding import LogFolding
from ..passes.paths import PathTruncation
from ..passes.search_listing import SearchListing
from ..passes.small_json import slim
from ..passes.tool_args import ToolArgTruncation
from ..passes.truncate import DEFAULT_LIMITS, Truncation, tool_family

__all__ = ["Ingested", "Pipeline", "Reduced"]


@dataclass(frozen=True, slots=True)
class Ingested:
    """A message's frozen form and what happened to it."""

    message: dict[str, Any]
    artifact_id: str | None = None  # the stored original, when anything was cut
    passes: tuple[str, ...] = ()
    raw_chars: int = 0
    chars: int = 0
    note: str = ""  # "dedup", "loop", "binary", "gated", "hard_limit", "not_smaller", "small_json" (re-encoded losslessly) or ""


@dataclass(frozen=True, slots=True)
class Reduced:
    """A text through the passes: what the agent reads, the passes that changed it, and the
    texts its markers name that must be stored before it is used (a web page's whole text,
    whose lines the page's cut markers name)."""

    text: str
    passes: tuple[str, ...] = ()
    stored: tuple[str, ...] = ()


class Pipeline:
    """The enabled passes, built once from a `Config`, and how to run them on a text."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        limits = DEFAULT_LIMITS if cfg.truncation_limits is None else cfg.truncation_limits
        self.images = ImageDownsample(max_bitmap_bytes=cfg.image_max_bytes, max_svg_bytes=cfg.svg_max_bytes)
        self.tool_args = ToolArgTruncation(
            max_chars=cfg.tool_arg_max_chars, head=cfg.preview_head, tail=cfg.preview_tail
        )
        self._all: dict[str, ReductionPass] = {
            "image_downsample": self.images,
            "json_arrays": JsonArrays(),
            "diff_folding": DiffFolding(),
            "search_listing": SearchListing(),
            "log_folding": LogFolding(),
            "html_slimming": HtmlSlimming(),
            "json_minify": JsonMinify(),
            "format_cleaning": FormatCleaning(),
            "line_number_strip": LineNumberStrip(compact=cfg.line_numbers == "compact"),
            "format_slimming": FormatSlimming(),
            "path_truncation": PathTruncation(max_len=cfg.path_max_chars),
            "truncate": Truncation(
                limits=limits,
                default_limit=cfg.default_truncation_limit,
                head=cfg.preview_head,
                tail=cfg.preview_tail,
            ),
        }
        self._profiles = {k.lower(): v for k, v in cfg.profiles.items()}

    def passes_for(self, tool_name: str) -> list[tuple[str, ReductionPass]]:
        names = self._profiles.get(tool_name.lower())
        if names is None:
            names = self._profiles.get(tool_family(tool_name))
        enabled = set(self.cfg.passes if names is None else names)
        return [(n, self._all[n]) for n in PASS_ORDER if n in enabled]

    def reduce_text(self, text: str, ctx: PassContext) -> Reduced:
        """Run the passes of the tool's profile that accept the text's kind
        (`passes/kinds.py`), in `PASS_ORDER`. Markup is shown as its page text when it can
        be rendered (the tool's truncation limit applied to that text); otherwise only the
        passes that accept markup besides the HTML pass (truncation) run on it."""
        kind = content_kind(text, ctx.tool_name, ctx.arguments)
        passes = [(n, p) for n, p in self.passes_for(ctx.tool_name) if kind in p.accepts]
        if kind == MARKUP:
            html = dict(passes).get("html_slimming")
            if isinstance(html, HtmlSlimming):
                slimmed = html.slim(text, ctx, self._limit(passes, ctx.tool_name))
                if slimmed is not None:
                    shown, whole = slimmed
                    return Reduced(shown, ("html_slimming",), (whole,) if whole is not None else ())
            passes = [(n, p) for n, p in passes if n != "html_slimming"]
        source = text
        applied: list[str] = []
        for name, p in passes:
            if name in CONTENT_PASSES and CONTENT_PASSES.intersection(applied):
                continue  # its line numbers would not be the original's
            try:
                out = p.apply(text, ctx)
            except Exception:  # a pass must never take the agent down; keep the text as it is
                continue
            if out is not text and out != text:
                if name == "truncate" and text is not source:
                    # Still too long after the other passes: preview the original itself, so
                    # the kept head and tail are its bytes and the marker's lines are its lines.
                    return Reduced(p.apply(source, ctx), ("truncate",))
                applied.append(name)
                text = out
        return Reduced(text, tuple(applied))

    @staticmethod
    def _limit(passes: list[tuple[str, ReductionPass]], tool_name: str) -> int | None:
        """The tool's truncation limit when truncation is among `passes`, else None."""
        truncate = dict(passes).get("truncate")
        return truncate.limit_for(tool_name) if isinstance(truncate, Truncation) else None

    def slim_json(self, text: str, ctx: PassContext) -> str | None:
        """A JSON output re-encoded losslessly (`small_json_minify`, `small_json_rows`; see
        passes/small_json.py) when that saves `min_saving`, else None. Small outputs count
        in tokens: `", "` -> `","` saves more tokens than chars. A file's text (`cat x.json`)
        stays exact: the agent may quote it back in an edit."""
        if (
            not self.cfg.small_json_minify
            or not any(n == "json_minify" for n, _ in self.passes_for(ctx.tool_name))
            or is_code_read(ctx.tool_name, ctx.arguments)
        ):
            return None
        out = slim(text, rows=self.cfg.small_json_rows)
        if out is None or len(out) > len(text) * (1.0 - self.cfg.min_saving):
            return None
        return out

    def image_enabled(self, tool_name: str) -> bool:
        return any(n == "image_downsample" for n, _ in self.passes_for(tool_name))
