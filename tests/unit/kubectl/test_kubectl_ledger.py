"""The slot ledger of `kubectl cronlease audit` (cronlease.kubectl.ledger): each verdict from a
table of facts, and a property: whatever the operator recorded, a slot is judged missing exactly
when nothing (a run, a counted skip, a counted run whose Job is gone) can account for it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronlease.kubectl.ledger import (
    Facts,
    RunRecord,
    SkipRecord,
    Verdict,
    build_ledger,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SLOTS = [T0 + i * MINUTE for i in range(6)]  # 09:00 .. 09:05


def at(i: int) -> datetime:
    return T0 + i * MINUTE


def ran(i: int, run: str | None = None, by: str = "cronlease") -> RunRecord:
    name = run or f"sj-{int(at(i).timestamp()) // 60}"
    return RunRecord(at(i), name, name, by, "Succeeded")


def verdicts(facts: Facts) -> list[str]:
    return [entry.verdict.value for entry in build_ledger(facts).entries]


NOW = at(10)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(
            Facts(SLOTS, at(-1), at(5), NOW, runs=[ran(i) for i in range(6)]),
            ["ran"] * 6,
            id="every-slot-ran",
        ),
        pytest.param(
            # The same run seen twice (a Job and its recentRuns entry) is one run.
            Facts(SLOTS[:1], at(-1), at(0), NOW, runs=[ran(0), ran(0)]),
            ["ran"],
            id="one-run-two-records",
        ),
        pytest.param(
            # A CronJob's Job and a cronlease run of one slot: doubled.
            Facts(SLOTS[:1], at(-1), at(0), NOW, runs=[ran(0), ran(0, "x-1", "cronjob/x")]),
            ["doubled"],
            id="cronjob-and-cronlease",
        ),
        pytest.param(
            Facts(SLOTS[:3], at(-1), at(2), NOW, runs=[ran(0), ran(2)]),
            ["ran", "missing", "ran"],
            id="a-slot-nothing-accounts-for",
        ),
        pytest.param(
            Facts(
                SLOTS[:3],
                at(-1),
                at(2),
                NOW,
                runs=[ran(0), ran(2)],
                skips=[SkipRecord("ConcurrencyForbid", at(1))],
                skipped_counts={"ConcurrencyForbid": 1},
            ),
            ["ran", "skipped", "ran"],
            id="a-skip-its-event-names",
        ),
        pytest.param(
            # Counted, but the Event is gone (expired): still explained, by count.
            Facts(SLOTS[:2], at(-1), at(1), NOW, runs=[ran(1)], skipped_counts={"Suspended": 1}),
            ["skipped", "ran"],
            id="a-skip-by-count",
        ),
        pytest.param(
            # Two unrun slots, one skip counted: one of them is missing.
            Facts(SLOTS[:2], at(-1), at(1), NOW, skipped_counts={"Suspended": 1}),
            ["missing", "skipped"],
            id="more-unrun-than-counted",
        ),
        pytest.param(
            # History cleanup deleted the oldest run: the status still counted it.
            Facts(SLOTS[:3], at(-1), at(2), NOW, runs=[ran(1), ran(2)], runs_gone=1),
            ["no record", "ran", "ran"],
            id="a-run-history-deleted",
        ),
        pytest.param(
            Facts(SLOTS[:4], at(1), at(2), NOW, runs=[ran(2)], buffered=frozenset()),
            ["before start", "before start", "ran", "due"],
            id="before-the-start-and-after-the-cursor",
        ),
        pytest.param(
            # Before the start, the CronJob's runs still count: the ledger spans a handover.
            Facts(
                SLOTS[:3],
                at(1),
                at(2),
                NOW,
                runs=[ran(0, "x-0", "cronjob/x"), ran(1, "x-1", "cronjob/x"), ran(2)],
            ),
            ["ran", "ran", "ran"],
            id="across-a-handover",
        ),
        pytest.param(
            Facts(SLOTS[:2], at(-1), None, at(0) + timedelta(seconds=30)),
            ["due", "future"],
            id="nothing-processed-yet",
        ),
        pytest.param(
            Facts(SLOTS[:2], at(-1), at(0), NOW, runs=[ran(0)], buffered=frozenset({at(1)})),
            ["ran", "waiting"],
            id="buffered",
        ),
    ],
)
def test_each_verdict(facts: Facts, expected: list[str]) -> None:
    assert verdicts(facts) == expected


def test_the_event_closest_after_a_slot_explains_it_newest_first() -> None:
    """Superseded slots 0-1 (its Event names 1), a Forbid skip at 4; slot 3 is unaccounted:
    Forbid's one count goes to slot 4, not 3, so 3 is the missing one."""
    facts = Facts(
        SLOTS[:5],
        at(-1),
        at(4),
        NOW,
        runs=[ran(2)],
        skips=[SkipRecord("Superseded", at(1)), SkipRecord("ConcurrencyForbid", at(4))],
        skipped_counts={"Superseded": 2, "ConcurrencyForbid": 1},
    )
    ledger = build_ledger(facts)
    assert [(e.verdict.value, e.detail) for e in ledger.entries] == [
        ("skipped", "Superseded"),
        ("skipped", "Superseded"),
        ("ran", "sj-29935262 Succeeded"),
        ("missing", "no run, no skip counted"),
        ("skipped", "ConcurrencyForbid"),
    ]
    assert not ledger.ok


def test_within_keeps_the_window_and_ok_follows_it() -> None:
    facts = Facts(SLOTS[:3], at(-1), at(2), NOW, runs=[ran(1), ran(2)])
    ledger = build_ledger(facts)
    assert not ledger.ok
    assert ledger.within(at(1), at(2)).ok
    assert ledger.within(at(1), at(2)).counts == {Verdict.RAN: 2}


@settings(max_examples=300, deadline=None)
@given(
    outcomes=st.lists(st.sampled_from(["ran", "twice", "skipped", "gone", "lost"]), max_size=30),
    lose_events=st.booleans(),
)
def test_missing_and_doubled_are_exactly_the_slots_nothing_or_two_runs_account_for(
    outcomes: list[str], lose_events: bool
) -> None:
    """An operator's history drawn slot by slot: each slot ran, ran twice, was skipped (counted,
    with or without its Event), ran and lost its Job (counted in runsCreated), or was lost
    (nothing). The ledger says doubled for each twice, and as many missing as were lost; no
    slot that ran is ever called missing or skipped."""
    slots = [at(i) for i in range(len(outcomes))]
    runs, skips = [], []
    counts: dict[str, int] = {}
    for i, outcome in enumerate(outcomes):
        if outcome in ("ran", "twice"):
            runs.append(ran(i))
        if outcome == "twice":
            runs.append(ran(i, f"other-{i}"))
        if outcome == "skipped":
            reason = ["Suspended", "ConcurrencyForbid"][i % 2]
            counts[reason] = counts.get(reason, 0) + 1
            if not lose_events:
                skips.append(SkipRecord(reason, at(i)))
    gone = outcomes.count("gone")
    cursor = slots[-1] if slots else None
    ledger = build_ledger(Facts(slots, at(-1), cursor, NOW, runs, skips, counts, gone))
    judged = [entry.verdict for entry in ledger.entries]
    for outcome, verdict in zip(outcomes, judged, strict=True):
        if outcome == "ran":
            assert verdict is Verdict.RAN
        if outcome == "twice":
            assert verdict is Verdict.DOUBLED
    assert judged.count(Verdict.MISSING) == outcomes.count("lost")
    unrun = outcomes.count("skipped") + outcomes.count("gone") + outcomes.count("lost")
    assert (
        judged.count(Verdict.SKIPPED)
        + judged.count(Verdict.NO_RECORD)
        + judged.count(Verdict.MISSING)
        == unrun
    )
    assert ledger.ok == ("lost" not in outcomes and "twice" not in outcomes)
