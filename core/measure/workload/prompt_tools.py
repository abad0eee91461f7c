"""The tool list the workload's system prompt offers: full schemas and deferred names.

`TOOLS` holds the thirteen function schemas sent with every request (OpenClaw's
first-class tools, in our own words); `DEFERRED` lists the tools reachable only through
tool_search, as name and one-line description. Data only: `prompt.py` lists both in
the STABLE part, and every session the builder makes carries `TOOLS` as its tool list.
"""

from __future__ import annotations


def _fn(name: str, desc: str, props: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "required": required, "properties": props},
        },
    }


def _s(desc: str) -> dict:
    return {"type": "string", "description": desc}


def _n(desc: str) -> dict:
    return {"type": "number", "description": desc}


TOOLS: list[dict] = [
    _fn("read", "Read a text or image file. Text comes back with line numbers (`cat -n` style); very long files "
        "can be paged with offset/limit. Images are attached to the conversation.",
        {"path": _s("File path, relative to the workspace or absolute."), "offset": _n("First line (1-based)."),
         "limit": _n("Maximum lines to return.")}, ["path"]),
    _fn("write", "Create or overwrite a file with the given content; parent folders are created.",
        {"path": _s("File path, relative or absolute."), "content": _s("Full file content.")}, ["path", "content"]),
    _fn("edit", "Replace exact text in one file. Each oldText must occur exactly once in the original and edits "
        "must not overlap; merge nearby changes into one edit and leave large unchanged spans out.",
        {"path": _s("File path, relative or absolute."),
         "edits": {"type": "array", "description": "Replacements applied to the original file.",
                   "items": {"type": "object", "required": ["oldText", "newText"],
                             "properties": {"oldText": _s("Exact text to find."), "newText": _s("Replacement.")}}}},
        ["path", "edits"]),
    _fn("apply_patch", "Apply a multi-file patch. The input starts with *** Begin Patch and ends with *** End Patch; "
        "use *** Add File, *** Update File and *** Delete File sections with @@ context hunks.",
        {"input": _s("The whole patch text.")}, ["input"]),
    _fn("exec", "Run a shell command in the workspace and return its combined stdout and stderr when it finishes. "
        "Commands that keep running past the yield window continue in the background and return a process "
        "session id; use `process` to poll, read logs, write to stdin or stop them. Do not use sleep loops as "
        "timers, do not restart the gateway from here, and prefer first-class tools (read, write, edit, grep, "
        "web_fetch) over shell equivalents. Output longer than the tool limit is cut with a notice.",
        {"command": _s("Shell command line (bash)."), "workdir": _s("Working directory; default workspace."),
         "timeout": _n("Seconds before the command is stopped."), "background": {"type": "boolean",
         "description": "Start in the background and return a session id at once."}}, ["command"]),
    _fn("process", "Manage commands that exec left running: list, poll, log, write, send-keys, kill. Poll and log "
        "report status, new output and whether the process waits for input.",
        {"action": _s("list | poll | log | write | send-keys | kill"), "sessionId": _s("Process session id."),
         "data": _s("Text for write/send-keys.")}, ["action"]),
    _fn("grep", "Search file contents with a regular expression (ripgrep semantics). Returns `path:line:text` "
        "for each match; respects .gitignore unless told otherwise.",
        {"pattern": _s("Regular expression."), "path": _s("File or folder to search."),
         "glob": _s("Only files matching this glob."), "ignoreCase": {"type": "boolean", "description": "Case-insensitive."}},
        ["pattern"]),
    _fn("ls", "List a directory: names in byte order with dotfiles, `/` after folders, sizes for files.",
        {"path": _s("Directory; default the workspace."), "limit": _n("Maximum entries.")}, []),
    _fn("web_search", "Search the web (Brave). Returns titles, URLs, short descriptions and page age as JSON. "
        "Use several focused queries rather than one vague one; quote exact phrases when looking for names.",
        {"query": _s("Search query."), "count": _n("Results, 1-10."), "freshness": _s("pd | pw | pm | py")},
        ["query"]),
    _fn("web_fetch", "Fetch a URL over HTTP(S) and return the response body as text (HTML pages come back as "
        "the server sent them). Follows up to five redirects, sends a desktop browser user agent, refuses "
        "private network addresses, and caches responses for fifteen minutes. Use it to read articles, docs, "
        "data pages and APIs found with web_search; for pages that need JavaScript or a login use the browser "
        "skill instead. Very large bodies are cut with a notice.",
        {"url": _s("http or https URL."), "maxChars": _n("Cut the body after this many characters.")}, ["url"]),
    _fn("memory_search", "Search MEMORY.md, USER.md and the Markdown files under memory/ semantically. Mandatory "
        "before answering questions about earlier work, decisions, dates, people, preferences or open todos. "
        "Returns snippets with path and line numbers; fetch exact lines with memory_get.",
        {"query": _s("What to look for."), "maxResults": _n("Maximum snippets.")}, ["query"]),
    _fn("memory_get", "Read exact lines from MEMORY.md, USER.md or a Markdown file under memory/.",
        {"path": _s("Memory file path."), "from": _n("First line."), "lines": _n("Number of lines.")}, ["path"]),
    _fn("message", "Send or manage messages on a connected channel (Slack, Telegram, Signal, email bridge, …). "
        "Actions: send, reply, react, edit, delete, poll. A proactive send needs `channel` and `target`; after a "
        "visible send the final reply must be exactly NO_REPLY. Never use shell commands or HTTP calls to deliver "
        "messages when this tool is available.",
        {"action": _s("send | reply | react | edit | delete | poll"), "channel": _s("Channel id."),
         "target": _s("Recipient or conversation."), "message": _s("Text to send.")}, ["action"]),
]  # fmt: skip

DEFERRED = (
    (
        "agents_list",
        "List configured agent ids with their model, runtime and workspace, as valid spawn targets.",
    ),
    (
        "ask_user",
        "Ask the human one to three structured questions and wait for the answer; only when truly blocked.",
    ),
    (
        "automations",
        "Schedule reminders, delayed wake-ups, recurring jobs and event watchers; never sleep in exec.",
    ),
    (
        "browser",
        "Drive a headless or attached browser: open, snapshot, click, type, screenshot, download, close.",
    ),
    ("canvas", "Show, hide or navigate the widget canvas on a paired desktop node."),
    ("cron_status", "Inspect scheduled automations: next run, last result, failures and owner."),
    (
        "dashboard",
        "Read and arrange the session dashboard; put and remove plugin widgets; focus a saved tab.",
    ),
    ("file_fetch", "Copy a file from a paired node by absolute path into the gateway media store."),
    (
        "file_write",
        "Write bytes to a paired node by absolute path; atomic, refuses to overwrite unless asked.",
    ),
    (
        "gateway",
        "Read the gateway configuration and schema; run an update only on an explicit owner request.",
    ),
    ("image_generate", "Create or edit an image from a prompt with the configured image model."),
    ("intent", "Create, list or cancel standing intents that fire when a described event happens."),
    ("nodes", "List paired nodes and their presence; describe, notify, or use a node's camera and screen."),
    ("pdf_extract", "Extract text, tables and page images from a PDF in the workspace."),
    ("plugins", "Search, install, enable, disable, reload or remove plugins without restarting the gateway."),
    (
        "progress_card",
        "Keep one durable status card for this session, for people not reading the transcript.",
    ),
    ("secrets", "List stored credential names, request a missing one through masked entry, or delete one."),
    (
        "session_status",
        "Current session facts: exact time, model, token usage, cache statistics, queue state.",
    ),
    (
        "sessions_history",
        "Bounded, sanitised excerpt of another session's transcript by session key and message id.",
    ),
    (
        "sessions_search",
        "Full-text search across past session transcripts; returns keys and snippet positions.",
    ),
    ("sessions_send", "Deliver a message into another session by key, optionally waiting for its reply."),
    (
        "sessions_spawn",
        "Start a subagent with an objective, output contract, write scope and verification step.",
    ),
    ("skill_workshop", "Draft, revise and publish reusable skills; proposals stay pending until approved."),
    ("speech", "Turn text into a voice note with the configured speech provider."),
    ("subagents", "List running subagents with status for debugging; not a completion mechanism."),
    ("transcribe", "Transcribe an audio or video file into timestamped text with speaker turns."),
    ("weather", "Current conditions and forecasts for a place, with a fallback to wttr.in."),
)
