"""All of TokenPilot's settings in one frozen record, with the paper's defaults.

Every field changes behaviour somewhere, and a test shows it. `Config.replace(...)`
gives a modified copy, so a config can be shared between sessions and threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from .errors import ConfigError
from .messages.compaction import COMPACTION_MARKERS


@dataclass(frozen=True, slots=True)
class VolatilePattern:
    """A user-declared volatile field: `kind` names the placeholder, `regex` finds values."""

    kind: str
    regex: str
    per_call: bool = False


# The one order in which passes run on a tool output; any subset may be enabled. Each pass
# runs only on the kinds of content it declares (`accepts`; `passes/kinds.py` tells an
# output's kind once, before any pass runs), so the order is also the reason for it:
PASS_ORDER = (
    # 1. Markup becomes text first, and alone: a web page is shown as its text, with every
    #    part a reader skips (navigation, share bars, hidden text) cut in place by a marker
    #    that names the lines of the page text it stands for (`passes/page_text.py`). No
    #    text pass ever reads raw markup: a fold of markup lines names lines the agent never
    #    sees and hides the article from this pass. Its text is not folded again either: a
    #    later fold's line numbers would name lines of no recallable text.
    "html_slimming",
    # 2. Inline images (data URIs) before anything measures the text.
    "image_downsample",
    # 3. Line cuts, on the text as the tool returned it, so each fold names the original's
    #    own lines (what `recall_artifact(start_line, end_line)` returns); at most one of
    #    them applies, since a second would number the first one's result.
    "json_arrays",
    "diff_folding",
    "search_listing",
    "log_folding",
    # 4. Layout: rewrites of the kept lines that change no word.
    "json_minify",
    "format_cleaning",
    "line_number_strip",
    "format_slimming",
    "path_truncation",
    # 5. The last resort, on the original: head and tail of its own bytes and lines.
    "truncate",
)

# Passes that cut whole lines of the original and name their line range (step 3 above).
CONTENT_PASSES = frozenset({"json_arrays", "diff_folding", "search_listing", "log_folding"})

# A file read is what the agent will quote back in an edit: keep its text exact
# (no whitespace or layout rewriting), only strip line-number gutters and images.
READ_PROFILE = ("image_downsample", "line_number_strip", "truncate")
DEFAULT_PROFILES = MappingProxyType(
    dict.fromkeys(("read", "file_read", "read_file", "view", "cat", "notebook_read"), READ_PROFILE)
)

# Tool families whose output is often large enough to be reduced (see passes/truncate.py).
BULKY_TOOL_FAMILIES = frozenset(
    {
        *("bash", "shell", "powershell", "exec", "run_command", "terminal", "exec_command", "local_shell"),
        *("grep", "rg", "search_files"),
        *("glob", "read", "file_read", "read_file", "view", "cat", "web_fetch", "fetch", "browser"),
        *("web_search", "search", "scrape", "open_url", "screenshot", "http_get", "curl"),
        # the same families under Gemini CLI's names
        *(
            "run_shell_command",
            "search_file_content",
            "read_many_files",
            "list_directory",
            "google_web_search",
        ),
        # and under OpenHands' (its shell, its Python cell, and the editor it shares with
        # SWE-agent, whose `view` reads whole files)
        *("execute_bash", "execute_ipython_cell", "str_replace_editor"),
    }
)

DEFAULT_PASSES = (
    "html_slimming",
    "image_downsample",
    "json_arrays",
    "diff_folding",
    "search_listing",
    "log_folding",
    "json_minify",
    "format_cleaning",
    "line_number_strip",
    "format_slimming",
    "truncate",
)


@dataclass(frozen=True, slots=True)
class Config:
    """How TokenPilot reduces, stabilises and renders. Defaults follow the paper (§5)."""

    # -- ingestion gates ----------------------------------------------------
    trigger_min_chars: int = 2200
    """A tool output shorter than this is never reduced (reduction would cost more than it saves)."""
    small_json_minify: bool = True
    """A tool output under `trigger_min_chars` that is one JSON object or array, encoded
    exactly as Python's `json.dumps(value)` writes it, is re-encoded compactly (no spaces
    between tokens), when its tool's passes include `json_minify` and that saves at least
    `min_saving`. Nothing is stored and no footer is added (a footer would cost more than a
    small output saves): the rewrite is used only when `passes.small_json.restore` gives the
    original back byte for byte, so no byte is lost (I3) without any recall. Above the gate
    the same re-encoding is used when it is no longer than what the cutting passes give
    (no artifact, so `recall_artifact` need not join the tools). Measured (openai profile,
    continuous, with `small_json_rows`): tau-bench 0.997x -> 0.947x of vanilla, tau2-bench
    1.001x -> 0.972x; the other shared sets and the built-in workload unchanged."""
    small_json_rows: bool = True
    """With `small_json_minify`, arrays of two or more objects with the same keys in the same
    order become `{"keys": [...], "rows": [[...], ...]}` (every value kept, in order; the
    keys are written once). Checked restorable like the rest."""
    max_tool_chars: int = 1200
    """Within a multi-part tool output, only text parts longer than this are reduced."""

    # -- passes -------------------------------------------------------------
    passes: tuple[str, ...] = DEFAULT_PASSES
    """Enabled passes, run in `PASS_ORDER`. `path_truncation` is off by default: cut paths
    are the identifiers an agent re-uses in its next call."""
    profiles: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: DEFAULT_PROFILES)
    """Per tool name (or family), the passes to run instead of `passes`. By default file
    reads keep their text exact (see `READ_PROFILE`)."""
    truncation_limits: Mapping[str, int | None] | None = None
    """Per tool family character limits; None uses the paper's table (see passes/truncate.py)."""
    default_truncation_limit: int = 50_000
    hard_limit_chars: int = 200_000
    """No single tool output enters the context longer than this, not even an unlimited
    read or a source the recall gate lets through in full: a 50 MB output must not
    overflow the window."""
    min_saving: float = 0.02
    """A reduction is applied only when its result, footer included, is at least this
    fraction shorter than the original; otherwise the original passes unchanged (a
    footer must never make an output longer than it was)."""
    preview_head: int = 600
    preview_tail: int = 400
    line_numbers: Literal["compact", "strip"] = "compact"
    """What `line_number_strip` does to numbered lines: "compact" keeps each number
    without its padding (`12\ttext`), "strip" drops them for one `[lines a-b]` header.
    Coding agents cite line numbers back (offsets, edit positions); stripping them
    hides what the next call needs (measured in the README)."""
    path_max_chars: int = 80
    image_max_bytes: int = 100_000
    svg_max_bytes: int = 50_000
    tool_arg_max_chars: int = 4000
    """String values in the agent's own tool-call arguments longer than this are cut
    (inside valid JSON); 0 disables it."""
    downsample_user_images: bool = True
    """Also downsample oversized image parts of user messages (the original is kept)."""

    # -- repetition ---------------------------------------------------------
    dedup: bool = True
    """A tool output identical to an earlier one becomes a preview pointing at it."""
    reshown: bool = True
    """Runs of 8+ lines that an earlier output still in view shows verbatim (a file read
    again, a test rerun) become one marker naming that output (`tokenpilot.ingest.reshown`);
    nothing is stored, since the context holds the lines."""
    call_cap: int = 5
    """An identical call with an identical result more than this many times in the
    window is withheld as a loop (0 disables)."""
    call_window: int = 20
    recall_gate_tau: int = 1
    """Once the agent recalls a source's artifacts more than tau times, later outputs of
    that source pass unreduced (up to `hard_limit_chars`). See README for why 1."""

    # -- the caller's own compaction -------------------------------------------
    compaction_markers: tuple[str, ...] = COMPACTION_MARKERS
    """A request whose last user message starts with one of these asks for a summary of
    the whole conversation (Claude Code's compaction): it is rendered with nothing evicted,
    since the summary is all the agent keeps (`tokenpilot.messages.compaction`). Empty: such a
    request sees the managed history like any other call."""

    # -- prefix stabilisation -----------------------------------------------
    stabilize: bool = True
    volatile_patterns: tuple[VolatilePattern, ...] = ()
    register_recall_tool: bool = True
    recall_tool_from: Literal["first_call", "first_artifact", "auto"] = "auto"
    """When `recall_artifact` joins the tool list: on the session's first call, on the
    first call that has something to recall (a reduced output or an evicted segment),
    or "auto": the first call when the agent has a tool whose output is often large
    (shells, reads, search, web fetches, see `BULKY_TOOL_FAMILIES`), else the first
    artifact. A session whose outputs never cross the gates (tau-bench's booking
    tools) then pays nothing for the schema; one that will need it pays no break."""
    min_shared_tokens: int = 1024
    """Placeholders replace the system prompt's volatile values only when at least this
    many tokens follow the first one (what another session or day can share from the
    cache). Below that, the session's prompt is sent as it came: a values block would
    cost more than the sharing gains. Decided once, at the session's first call."""
    placeholders: Literal["always", "once_varied"] = "always"
    """When a session's system prompt gets placeholders for its volatile values: always
    (when `min_shared_tokens` allows), or "once_varied": only once this TokenPilot has
    seen the same prompt with other values (another session, another day). With
    "once_varied" a prompt whose values never vary (tau2-bench's fixed clock) goes as it
    came, sharing just as well and paying nothing for a values block (tau2: 1.001x ->
    1.000x of vanilla); but the first session is not shared with the second, which starts
    the placeholder form (the built-in workload: 0.192x -> 0.194x). Hence "always"."""
    session_values: Literal["merge", "message"] = "merge"
    """Where session-constant placeholder values go: appended to the system message
    after the stable text ("merge"), or as a separate system message right after it."""
    tail_role: Literal["user", "system"] = "user"
    """Role of the per-call values message at the very end of the request."""
    system_updates: Literal["append", "replace"] = "append"
    """A system prompt that changes mid-session: keep the first one and append the change
    to history ("append", no cache break), or re-render it in place ("replace")."""

    # -- robustness ---------------------------------------------------------
    strict: bool = False
    """Malformed messages raise `MessageError` (True) or pass through untouched and are
    counted in stats (False)."""
    max_messages: int = 100_000
    """`prepare` refuses a history longer than this with `MessageError`, in either mode:
    long agent sessions reach a few thousand messages; far more is a runaway client."""
    max_depth: int = 64
    """`prepare` refuses a message (or tool definition) with more levels of nested objects
    and arrays than this, in either mode: real messages need under 10 (a tool call's
    `function` object is at level 4, the least allowed), and a deeper one would exhaust
    the stack when hashed or serialised."""

    def __post_init__(self) -> None:
        for name in (
            "trigger_min_chars",
            "max_tool_chars",
            "default_truncation_limit",
            "hard_limit_chars",
            "preview_head",
            "preview_tail",
            "path_max_chars",
            "image_max_bytes",
            "svg_max_bytes",
            "tool_arg_max_chars",
            "call_cap",
            "call_window",
            "recall_gate_tau",
            "min_shared_tokens",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        for name, least in (("max_messages", 1), ("max_depth", 4)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"{name} must be an integer of at least {least}, got {value!r}")
        unknown = [p for p in self.passes if p not in PASS_ORDER]
        for prof in self.profiles.values():
            unknown += [p for p in prof if p not in PASS_ORDER]
        if unknown:
            raise ConfigError(f"unknown passes {unknown}; known: {list(PASS_ORDER)}")
        if not isinstance(self.min_saving, (int, float)) or not 0.0 <= self.min_saving < 1.0:
            raise ConfigError(f"min_saving must be in [0, 1), got {self.min_saving!r}")
        if self.line_numbers not in ("compact", "strip"):
            raise ConfigError("line_numbers must be 'compact' or 'strip'")
        if self.recall_tool_from not in ("first_call", "first_artifact", "auto"):
            raise ConfigError("recall_tool_from must be 'first_call', 'first_artifact' or 'auto'")
        if self.placeholders not in ("always", "once_varied"):
            raise ConfigError("placeholders must be 'always' or 'once_varied'")
        if self.session_values not in ("merge", "message"):
            raise ConfigError("session_values must be 'merge' or 'message'")
        if self.tail_role not in ("user", "system"):
            raise ConfigError("tail_role must be 'user' or 'system'")
        if self.system_updates not in ("append", "replace"):
            raise ConfigError("system_updates must be 'append' or 'replace'")
        markers = self.compaction_markers
        if not isinstance(markers, tuple) or not all(isinstance(m, str) and m.strip() for m in markers):
            raise ConfigError(f"compaction_markers must be a tuple of non-empty strings, got {markers!r}")
        if self.hard_limit_chars < self.preview_head + self.preview_tail:
            raise ConfigError("hard_limit_chars must leave room for the preview")

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)
