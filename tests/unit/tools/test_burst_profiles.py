"""The operator's profile table (hack/burst_profiles.py): each function's share of the samples
with it anywhere on the stack, once per sample."""

from __future__ import annotations

from burst_profiles import cumulative_table

COLLAPSED = """\
<module> (bench.py:8);run (scheduler.py:40);decide (decision.py:12) 6
<module> (bench.py:8);run (scheduler.py:41);walk (cron.py:3);walk (cron.py:9) 3
<module> (bench.py:8);poll (selectors.py:468) 1
not a stack line
"""


def rows(table: str) -> dict[str, tuple[float, float]]:
    found = {}
    for line in table.splitlines()[2:]:
        cumulative, own, function = line.split(maxsplit=2)
        found[function] = (float(cumulative), float(own))
    return found


def test_cumulative_and_self_shares() -> None:
    table = cumulative_table(COLLAPSED)
    assert table.startswith("10 samples")
    found = rows(table)
    assert found["<module> (bench.py)"] == (100.0, 0.0)
    # two lines of run() are one function
    assert found["run (scheduler.py)"] == (90.0, 0.0)
    assert found["decide (decision.py)"] == (60.0, 60.0)
    # recursion counts a sample once
    assert found["walk (cron.py)"] == (30.0, 30.0)
    assert found["poll (selectors.py)"] == (10.0, 10.0)
    assert next(iter(found)) == "<module> (bench.py)"  # most time first


def test_no_samples() -> None:
    assert cumulative_table("") == "no samples\n"
