"""The workload's skill catalogue: names, descriptions, where each SKILL.md lives, its text.

The system prompt lists the skills under their absolute locations; the session builder
writes a SKILL.md when a task reads one. Both take the catalogue from here.
"""

from __future__ import annotations

from .session_env import Env

SKILLS = (
    (
        "github",
        "Work with GitHub through the gh CLI: issues, pull requests, reviews, CI runs and release notes.",
    ),
    (
        "meeting-notes",
        "Turn meeting transcripts into action items, decision logs and follow-up emails with owners and dates.",
    ),
    (
        "csv-analyst",
        "Explore tabular data with pandas one-liners: shape, groupby summaries, outliers, charts to PNG.",
    ),
    (
        "log-triage",
        "Find the first real error in long build, test or service logs; correlate request ids and stack traces.",
    ),
    (
        "web-research",
        "Multi-source research briefs: search, read primary sources, cross-check numbers, cite URLs.",
    ),
    (
        "python-testing",
        "Run and fix pytest suites: isolate failures, read tracebacks, make the smallest fix, rerun.",
    ),
    ("calendar", "Read and create calendar events through the configured CalDAV account."),
    ("email-drafts", "Draft replies and follow-ups in the user's voice; never send without confirmation."),
    ("home-assistant", "Query and control Home Assistant entities through its REST API."),
    ("obsidian", "Search and edit the user's Obsidian vault with wiki links and front matter intact."),
    ("docker-ops", "Inspect containers, images and compose stacks; read logs; restart only on request."),
    ("weather", "Forecasts and current conditions with web_fetch, falling back to wttr.in via curl."),
    ("spreadsheet", "Read and write xlsx and ods workbooks: sheets, named ranges, formulas kept intact."),
    ("slides", "Build short slide decks in Markdown and export them to PDF with the local renderer."),
    ("pdf-tools", "Split, merge, rotate and OCR PDF files; extract tables to CSV."),
    ("travel", "Compare train and flight options, keep bookings in the calendar, watch for delays."),
    ("finance", "Categorise bank exports, reconcile receipts, and summarise monthly spending by category."),
    ("summarize", "Summarise long documents, feeds, videos and podcasts into a few sourced bullet points."),
)


def skill_path(env: Env, name: str) -> str:
    """Where a skill's SKILL.md lives: some in the workspace, most in the global OpenClaw install."""
    i = [n for n, _ in SKILLS].index(name)
    where = (
        f"{env.workspace}/skills"
        if i % 3 == 0
        else f"{env.home}/.npm-global/lib/node_modules/openclaw/skills"
    )
    return f"{where}/{name}/SKILL.md"


def skill_md(name: str, steps: list[str], notes: list[str]) -> str:
    """A SKILL.md file: front matter, when to use it, numbered steps and notes."""
    desc = dict(SKILLS)[name]
    body = "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1))
    extra = "\n".join(f"- {n}" for n in notes)
    return (
        f'---\nname: {name}\ndescription: {desc}\nmetadata: {{"openclaw": {{"emoji": "🧰", "requires": '
        f'{{"bins": ["bash"]}}}}}}\n---\n\n# {name}\n\n{desc}\n\n## When to use\n\nUse this skill when the '
        f"request matches the description above. Do not use it for unrelated work.\n\n## Steps\n\n{body}\n\n"
        f"## Notes\n\n{extra}\n"
    )
