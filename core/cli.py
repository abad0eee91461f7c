"""`tokenpilot` command line: bench, calibrate, compact; adapters add theirs (serve, openclaw)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__
from .errors import ConfigError, TokenPilotError
from .measure.cachesim import get_profile
from .pricing import Prices

console = Console()


def _trace_sets(paths: Sequence[str], seed: int, sessions: int, combined: bool = True) -> dict[str, list]:
    from .measure.traces import load

    if not paths:
        from .measure.workload import generate

        return {"default workload": generate(seed=seed, sessions=sessions)}
    sets: dict[str, list] = {}
    for p in paths:
        loaded = load(p)
        if loaded:
            sets[Path(p).name or p] = loaded
    if len(sets) > 1 and combined:
        sets["all"] = [s for group in list(sets.values()) for s in group]
    return sets


def cmd_bench(args: argparse.Namespace) -> int:
    from .measure.bench import (
        count_calls,
        default_methods,
        markdown,
        print_table,
        run_bench,
        write_json,
        write_plots,
    )
    from .measure.bench.methods import ablation_methods, method_names, peer_names

    if getattr(args, "live", None) or getattr(args, "local", False):
        from .measure.bench.live_cli import cmd_live

        return cmd_live(args, console)
    if args.calibrate:
        return cmd_calibrate(args.calibrate)
    for name in (args.profile or "openai").split(","):
        get_profile(name.strip())  # an unknown profile fails now, not after the replay
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            "--plot needs matplotlib: pip install 'tokenpilot[notebooks]' (or pip install matplotlib)"
        )
    sets = _trace_sets(args.paths, args.seed, args.sessions, combined=not args.no_all)
    if not sets:
        console.print("[red]no sessions found[/red]")
        return 2
    if args.profile is None:  # Gemini CLI runs only on Gemini: its sessions are priced on its cache
        only_gemini = all(getattr(s, "fmt", None) == "gemini_cli" for ss in sets.values() for s in ss)
        args.profile = "gemini" if only_gemini else "openai"
    wanted = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    peers: bool | set[str] = args.peers or {m for m in wanted or () if m in peer_names()}
    known = method_names(ablation=args.ablation)
    unknown = [m for m in wanted or () if m not in known]
    if unknown or wanted == []:
        console.print(
            f"[red]unknown method(s): {', '.join(unknown) or '(none given)'}[/red]; known: {', '.join(known)}"
        )
        return 2

    def methods():
        ms = ablation_methods() if args.ablation else default_methods(peers=peers)
        return [m for m in ms if wanted is None or m.name in wanted]

    modes = ["continuous", "isolated"] if args.mode == "both" else [args.mode]
    profiles = [p.strip() for p in args.profile.split(",")]
    total = (
        count_calls({k: v for k, v in sets.items() if k != "all" or len(sets) == 1})
        * len(methods())
        * len(modes)
        * len(profiles)
    )
    if "all" in sets:
        total *= 2
    determinism = bool(args.determinism or peers)
    if determinism:
        total *= 2  # every request rendered a second time by a fresh method
    prices = Prices(hit=args.price_hit, miss=args.price_miss, output=args.price_output)
    with Progress(
        TextColumn("[bold]replaying"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("calls", total=total)
        results = run_bench(
            sets,
            methods=methods,
            modes=modes,
            profiles=profiles,
            prices=prices,
            on_call=lambda: progress.advance(task),
            determinism=determinism,
        )
    from .tokens import fallback_note

    note = fallback_note()
    print_table(
        results,
        console,
        title=f"tokenpilot bench — prices $/M hit {prices.hit} miss {prices.miss} out {prices.output}"
        + (f"\n{note}" if note else ""),
        wide=args.wide,
        legend=True,
    )
    if args.per_session:
        from .measure.bench.per_session import print_sessions

        print_sessions(results, console)
    builtin = not args.paths
    what = (
        "the built-in synthetic workload (seeded OpenClaw-style sessions)"
        if builtin
        else f"{count_calls({k: v for k, v in sets.items() if k != 'all'}):,} recorded calls"
    )
    console.print(
        f"\nMeasured: {what}, replayed teacher-forced;\ncache hits come from the prefix-cache "
        f"simulator ({', '.join(profiles)} profile), not from a provider.",
        highlight=False,
        markup=False,
    )
    console.print(
        "Next: tokenpilot bench PATH on your own transcripts (OpenAI chat JSON/JSONL, Claude Code,\n"
        "Codex CLI, Gemini CLI, OpenClaw, OpenHands, SWE-agent, tau-bench); --wide for every column;\n"
        "--ablation for each rule taken away; --live URL for a real endpoint.",
        highlight=False,
        markup=False,
    )
    if args.json:
        write_json(results, args.json)
        console.print(f"wrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
        console.print(f"wrote {args.markdown}")
    if args.plot:
        for p in write_plots(results, args.plot):
            console.print(f"wrote {p}")
    return 0


def cmd_calibrate(paths: Sequence[str]) -> int:
    from .measure.calibrate import calibrate_all
    from .measure.traces import load

    sessions = [s for p in paths for s in load(p)]
    reports = calibrate_all(sessions)
    if not reports:
        console.print("[yellow]no sessions with recorded cache usage[/yellow]")
        return 1
    from rich.table import Table

    t = Table(title="simulated vs recorded cache reads, per call")
    for col in ("profile", "calls", "within 5%", "median |error|", "p90 |error|"):
        t.add_column(col, justify="right")
    for name, rep in reports.items():
        q = rep.quantiles()
        t.add_row(
            name,
            str(rep.calls),
            f"{100 * rep.share_within:.1f}%",
            f"{rep.median_abs_error:.0f}",
            f"{q.get('p90', 0):.0f}",
        )
    console.print(t)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    """Compact recorded sessions with TokenPilot and print what it saved at the last call."""
    from rich.table import Table

    from .measure.bench.methods import TokenPilotMethod, Vanilla
    from .measure.bench.replay import replay

    sets = _trace_sets([args.path], 0, 0)
    t = Table(title=f"TokenPilot on {args.path}: context at each session's last call")
    for col in ("session", "calls", "tokens before", "tokens after", "saved"):
        t.add_column(col, justify="right")
    for sessions in sets.values():
        for s in sessions:
            if not s.calls:
                continue
            before = replay([s], Vanilla()).calls[-1].prompt_tokens
            after = replay([s], TokenPilotMethod()).calls[-1].prompt_tokens
            t.add_row(
                s.id[:40],
                str(len(s.calls)),
                f"{before:,}",
                f"{after:,}",
                f"{100 * (1 - after / before):.1f}%" if before else "-",
            )
    console.print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tokenpilot", description="Cache-efficient context management for LLM agents."
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log what TokenPilot decides (INFO level)"
    )
    parser.add_argument("--version", action="version", version=f"tokenpilot {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser(
        "bench", help="replay sessions through every method and price them (default: built-in workload)"
    )
    b.add_argument(
        "paths", nargs="*", help="recorded sessions: files or folders (default: the built-in workload)"
    )
    b.add_argument("--methods", help="comma-separated method names (default: all)")
    b.add_argument(
        "--ablation",
        action="store_true",
        help="TokenPilot with each segment rule, compact line numbers, the gate minimum and each content-aware pass taken away, and the B sweep",
    )
    b.add_argument(
        "--no-all",
        action="store_true",
        help="with several paths, one table per path only (no combined 'all' set, which replays everything again)",
    )
    b.add_argument(
        "--peers",
        action="store_true",
        help="also run other products from their own code: LangChain's context editing and "
        "summarization middleware, Headroom, OpenClaw's contextPruning (pip install 'tokenpilot[peers]')",
    )
    b.add_argument(
        "--determinism",
        action="store_true",
        help="render every request twice with fresh methods and report whether the bytes match "
        "(on with --peers)",
    )
    b.add_argument(
        "--wide",
        action="store_true",
        help="every column (about 160 wide): tokens, peak context, kind, same bytes",
    )
    b.add_argument(
        "--per-session",
        action="store_true",
        help="also a table per trace set with each session's cost against vanilla and its retention",
    )
    b.add_argument("--mode", choices=["continuous", "isolated", "both"], default="continuous")
    b.add_argument(
        "--profile",
        default=None,
        help="cache profiles: openai, anthropic, deepseek, gemini, vllm (comma-separated; default "
        "openai, gemini where every session is Gemini CLI's)",
    )
    b.add_argument("--json", metavar="PATH", help="write one record per method × mode × profile × trace set")
    b.add_argument("--markdown", metavar="PATH", help="write the tables as Markdown")
    b.add_argument(
        "--plot", metavar="DIR", help="write PNG figures (context per call, hit rate per task, B sweep)"
    )
    b.add_argument(
        "--calibrate", nargs="+", metavar="PATH", help="compare simulated with recorded cache reads instead"
    )
    b.add_argument("--seed", type=int, default=0, help="seed of the built-in workload")
    b.add_argument("--sessions", type=int, default=4, help="sessions in the built-in workload")
    b.add_argument("--price-hit", type=float, default=0.075, help="$ per million cached prompt tokens")
    b.add_argument("--price-miss", type=float, default=0.75, help="$ per million uncached prompt tokens")
    b.add_argument("--price-output", type=float, default=4.50, help="$ per million output tokens")
    b.add_argument(
        "--live", metavar="URL", help="replay the live workload against an OpenAI-compatible endpoint"
    )
    b.add_argument(
        "--local",
        action="store_true",
        help="start llama.cpp with SmolLM2 (tokenpilot[local]) and replay on it",
    )
    b.add_argument("--live-model", help="model name sent to the --live endpoint")
    b.add_argument("--live-sessions", type=int, default=2, help="sessions of the live workload")
    b.add_argument("--max-usd", type=float, help="refuse a --live run whose estimated cost exceeds this")
    b.set_defaults(func=cmd_bench)

    c = sub.add_parser("compact", help="compact recorded sessions and print what TokenPilot saved")
    c.add_argument("path")
    c.set_defaults(func=cmd_compact)

    _add_plugin_commands(sub)
    return parser


COMMANDS_GROUP = "tokenpilot.commands"


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Subcommands of installed adapters (`serve`, `openclaw`, ...), found through the
    `tokenpilot.commands` entry points, so the core names no host. Each entry point is
    a `register(subparsers)`; one that fails to load or to register is skipped with one
    warning line, so a broken adapter never takes `tokenpilot bench` down with it."""
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            ep.load()(sub)
        except Exception as exc:  # noqa: BLE001 - any failure of a third-party plugin
            logging.getLogger(__name__).warning("tokenpilot: skipping commands of %s: %s", ep.value, exc)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse and dispatch: a known mistake is one line on stderr and exit 2."""
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit:  # --help, --version, a usage error: their text must reach a closed pipe too
            sys.stdout.flush()
            raise
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return code
    except KeyboardInterrupt:
        return 130
    except TokenPilotError as exc:  # a bad path, file, profile or missing extra: one line, no traceback
        print(f"tokenpilot: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`tokenpilot ... | head`): stop quietly, as Unix tools do, and
        # point stdout at /dev/null so the interpreter's own flush at exit has nowhere to fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
