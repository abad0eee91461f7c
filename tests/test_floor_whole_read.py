"""Issue #26's per-session floors: a whole read of a file stays in use while the agent
names the file, even after a partial read of it (`segments.last_uses`), so the
stale-output rule no longer retires the file being worked on (mini-swe-agent
django-13321 had 86.7% retention, django-15252 88.8%)."""

from __future__ import annotations

from shell_session import SRC, bash, records, working_on_a_file

from tokenpilot.lifecycle.segments import SegmentRules, evictable_bundles, last_uses, rule_of


# ---------------------------------------------------------------------------
# a whole read stays in use while its file is named
# ---------------------------------------------------------------------------
def test_a_partial_read_does_not_take_the_whole_reads_name():
    s = working_on_a_file(12)
    uses = last_uses(records(s))
    assert uses[0] == len(uses) - 1  # the words of the last turn name base.py: the whole read is in use


def test_the_stale_rule_keeps_the_whole_read_of_the_file_being_worked_on():
    s = working_on_a_file(12)
    out = evictable_bundles(records(s), SegmentRules(stale_after_turns=8, stale_min_tokens=200))
    assert 0 not in out


def test_a_whole_read_goes_stale_once_the_file_is_no_longer_named():
    s = working_on_a_file(2)
    bash(s, "sed -i 's/a/b/' other.py", "", text="A fix elsewhere.")  # a file changed since the read
    for i in range(12):
        bash(s, f"python other_{i}.py", f"fine {i}", text=f"Now the tests, step {i}.")
    out = evictable_bundles(records(s), SegmentRules(stale_after_turns=8, stale_min_tokens=200))
    assert rule_of(out[0]) == "stale output"


def test_a_whole_write_supersedes_the_whole_read_it_replaces():
    s = working_on_a_file(0)
    bash(s, f"cat > {SRC} << 'EOF'\nnew content\nEOF", "")  # turn 2: the file written whole
    for i in range(10):
        bash(s, f"python check_{i}.py", f"ok {i}", text=f"base.py now passes case {i}.")
    uses = last_uses(records(s))
    assert uses[0] == 2  # the write itself names it; the names after it are not charged to the read
