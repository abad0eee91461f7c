"""search_listing's listings (paths under a shared folder, `ls -l` rows) and log_folding's
repeated blocks that take in errors and tracebacks: unit tests that fail without each
rule, and properties of every content pass (deterministic, never larger, and every
marker's range holds exactly the lines it replaced, checked by rebuilding the original)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from reduction_restore import restore

from tokenpilot.passes.base import PassContext
from tokenpilot.passes.diff_folding import DiffFolding
from tokenpilot.passes.folding import parse_markers
from tokenpilot.passes.log_folding import LogFolding
from tokenpilot.passes.search_listing import SearchListing

AID = "art_" + "cd" * 12
CTX = PassContext(tool_name="bash", artifact_id=AID)
DEPS = ("sourceror", "finch", "owl", "spitfire", "igniter", "mime", "jason", "mint", "text_diff", "req")
RELATIVE = SearchListing(whole_paths=False)  # paths relative to the folder they share


# -- search_listing: paths under a shared folder ------------------------------------


def test_a_listing_keeps_its_paths_whole_by_default():
    """The agent opens what it found by the path as written: by default no listing's
    path is split into a folder marker and a rest."""
    listing = "".join(f"/home/dev/projects/spotter/deps/{d}/mix.exs\n" for d in DEPS)
    assert SearchListing().apply(listing, CTX) is listing
    hits = "".join(f"lib/app/server.ex:{n}:def handle_call(:x{n}, state)\n" for n in range(10))
    assert "10 hits in lib/app/server.ex" in SearchListing().apply(hits, CTX)  # hits still grouped


def test_paths_in_sibling_folders_group_under_the_folder_they_share():
    listing = "".join(f"/home/dev/projects/spotter/deps/{d}/mix.exs\n" for d in DEPS)
    out = RELATIVE.apply(listing, CTX)
    assert "10 paths under /home/dev/projects/spotter/deps/, shown below relative to it" in out
    assert "\nfinch/mix.exs\nowl/mix.exs\n" in out
    assert len(out) < len(listing)
    assert restore(out, listing) == listing


def test_a_folder_of_its_own_still_groups_by_that_folder():
    listing = "".join(f"./tests/integration/fixtures/sample_{i}.json\n" for i in range(12))
    out = RELATIVE.apply(listing, CTX)
    assert "12 entries of ./tests/integration/fixtures/, shown below without the path" in out
    assert restore(out, listing) == listing


def test_a_path_outside_the_shared_folder_ends_the_group():
    listing = "".join(f"/srv/projects/application/deps/{d}/mix.exs\n" for d in DEPS)
    listing += "/srv/projects/application/mix.exs\n"
    out = RELATIVE.apply(listing, CTX)
    assert out.endswith("\n/srv/projects/application/mix.exs\n")
    ((_, start, end),) = parse_markers(out)
    assert (start, end) == (1, 10)
    assert restore(out, listing) == listing


def test_paths_that_share_only_the_root_are_not_grouped():
    listing = "".join(f"/a{i % 2}/b/c{i % 3}/f{i}.py\n" for i in range(400))
    out = RELATIVE.apply(listing, CTX)
    assert "paths under /," not in out
    assert restore(out, listing) == listing


# -- search_listing: ls -l rows -----------------------------------------------------


def _ls(names: list[str]) -> str:
    rows = ["total 900\n"]
    for k, name in enumerate(names):
        if name.endswith("/"):
            rows.append(f"drwxrwxrwx   {k % 9 + 2} root root  4096 Sep 10  2025 {name[:-1]}\n")
        else:
            rows.append(f"-rw-r--r--   1 root root  {180 + k:>4} Sep 10 08:41 {name}\n")
    return "".join(rows)


def test_ls_l_rows_become_their_names():
    names = [f"admin_{w}/" for w in ("checks", "docs", "filters", "inlines", "ordering", "views")] + [
        "urls.py"
    ]
    text = _ls(names)
    out = SearchListing().apply(text, CTX)
    assert out.startswith("total 900\n[… 7 rows of an ls -l listing, shown below by name (folders end in /)")
    assert out.endswith(
        "\nadmin_checks/\nadmin_docs/\nadmin_filters/\nadmin_inlines/\nadmin_ordering/\nadmin_views/\nurls.py\n"
    )
    assert "root" not in out and "Sep 10" not in out
    assert restore(out, text) == text


def test_a_symlink_row_keeps_its_target():
    text = _ls([f"lib{k}.so" for k in range(5)]).replace(
        "-rw-r--r--   1 root root   182 Sep 10 08:41 lib2.so",
        "lrwxrwxrwx   1 root root     7 Sep 10 08:41 lib2.so -> lib1.so",
    )
    out = SearchListing().apply(text, CTX)
    assert "\nlib2.so -> lib1.so\n" in out
    assert restore(out, text) == text


def test_few_rows_are_left_as_they_are():
    text = _ls(["a.py", "b.py"])
    assert SearchListing().apply(text, CTX) is text


# -- log_folding: repeated blocks with errors -----------------------------------------


def _traceback(where: str) -> str:
    frames = "".join(
        f'  File "/usr/lib/python3.11/importlib/__init__.py", line {126 + k}, in import_module\n'
        f"    return _bootstrap._gcd_import(name[level:], package, level)\n"
        for k in range(4)
    )
    return f"Traceback (most recent call last):\n  File \"/testbed/{where}.py\", line 3, in <module>\n{frames}ModuleNotFoundError: No module named 'sqlparse'\n"


def test_a_traceback_printed_again_points_at_its_first_copy():
    log = _traceback("run_a") + "\nDuring handling, retried:\n" + _traceback("run_a") + "done\n" * 5
    out = LogFolding().apply(log, CTX)
    assert out.count("ModuleNotFoundError: No module named 'sqlparse'") == 1  # the first copy, whole
    assert out.startswith(_traceback("run_a"))
    assert "11 lines identical to lines 1–11, lines 14–24 of the original" in out
    assert restore(out, log) == log


def test_a_traceback_that_differs_keeps_what_differs():
    log = _traceback("run_a") + "\n" + _traceback("run_b") + "done\n" * 5
    out = LogFolding().apply(log, CTX)
    assert '  File "/testbed/run_b.py", line 3, in <module>\n' in out  # the frame that differs
    # the frames and the exception line it shares with the first copy point back at it
    assert "9 lines identical to lines 3–11, lines 15–23 of the original" in out
    assert restore(out, log) == log


def test_the_closing_summary_is_never_folded_into_a_pointer():
    block = "FAILED tests/test_a.py::test_x - AssertionError\nFAILED tests/test_a.py::test_y - KeyError\n1 failed\n"
    log = "run 1\n" + block + "run 2\n" + block
    out = LogFolding(summary_lines=3).apply(log, CTX)
    assert out.endswith(block)  # the last lines are the verdict: shown as printed
    assert out.count("FAILED tests/test_a.py::test_x") == 2


# -- properties of every content pass ---------------------------------------------------

_piece = st.sampled_from(
    [
        "Traceback (most recent call last):",
        '  File "/x/m.py", line 3, in f',
        "    g()",
        "ValueError: bad",
        "error: x",
        "Compiling a 12",
        "ok",
        "",
        "src/a/b.py:3:x",
        "src/a/c.py",
        "/home/u/deps/x/mix.exs",
        "/home/u/deps/y/mix.exs",
        "drwxr-xr-x  2 root root 4096 Sep 10  2025 admin",
        "-rw-r--r--  1 root root  189 Jan  2 10:41 README.rst",
        "@@ -1,3 +1,3 @@",
        " context",
        "+added",
        "-removed",
    ]
)
_text = st.tuples(
    st.lists(st.one_of(_piece, st.text(max_size=10)), max_size=50),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
).map(lambda t: t[1].join(t[0]) + (t[1] if t[2] else ""))
_PASSES = [
    LogFolding(min_run=3),
    LogFolding(min_block=2),
    SearchListing(min_group=2),
    SearchListing(),
    DiffFolding(min_fold=1),
]


@settings(max_examples=300, deadline=None)
@given(text=_text, k=st.integers(0, len(_PASSES) - 1))
def test_deterministic_never_larger_and_every_range_holds_the_lines_it_replaced(text, k):
    p = _PASSES[k]
    out = p.apply(text, CTX)
    assert out == p.apply(text, CTX)
    assert len(out) <= len(text)
    assert restore(out, text) == text
