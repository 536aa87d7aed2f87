"""Exactly once across edits of the trigger (issue 33, finding 6).

A ScheduledJob promises each instant at most one run over its whole life, whatever edits happen:
a GitOps revert of runAt (X, then Y, then X again) after X's Job is gone (TTL, history cleanup)
must not run X twice, nor may a runAt land on a slot its schedule already ran. The record is
`status.processedUntil`, which no edit moves back: an instant at or before it was run or skipped.

The table drives decide() through edit sequences with every Job gone before the next edit (the
worst case: nothing but the status remembers); the property does the same for any sequence of
edits, waits and Job deletions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    after_apply,
    condition,
    processed,
    run_at_spec,
    seconds,
    skip_counts,
    spec,
    utc,
    view,
)
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronlease.core.decide.decision import Decision, PlannedRun, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import TRIGGER_SCHEDULE, format_time, parse_time

X = utc(2026, 1, 5, 10, 0)
Y = utc(2026, 1, 5, 10, 30)
ALREADY = "AlreadyProcessed"


@dataclass(frozen=True)
class Step:
    """The spec from this step on (an edit if it differs), and when the decision runs."""

    spec: dict[str, Any]
    at: datetime
    jobs_gone: bool = True  # every Job deleted before this step (a TTL, history cleanup)


@dataclass
class Played:
    runs: list[PlannedRun]
    last: Decision
    sj: ScheduledJobView


def finished(jobs: list[JobInfo], now: datetime) -> list[JobInfo]:
    return [
        dataclasses.replace(job, state=JobState.SUCCEEDED, finished_at=now)
        if job.state is JobState.ACTIVE
        else job
        for job in jobs
    ]


def play(steps: list[Step]) -> Played:
    """Each step: the spec is edited (a new generation), the Jobs end (and may be gone), and
    decide() runs at the step's time, its decision applied as the shell does."""
    sj = view(steps[0].spec, created_at=utc(2026, 1, 5, 8, 30))
    jobs: list[JobInfo] = []
    runs: list[PlannedRun] = []
    decision = Decision()
    for step in steps:
        if step.spec != sj.spec:
            sj = dataclasses.replace(sj, spec=step.spec, generation=sj.generation + 1)
        jobs = [] if step.jobs_gone else finished(jobs, step.at)
        decision = decide(sj, jobs, step.at)
        runs += decision.runs
        sj, jobs = after_apply(sj, jobs, decision)
    return Played(runs, decision, sj)


HOURLY = spec()
SECONDS = spec(schedule="*/30 * * * * *")


@pytest.mark.parametrize(
    ("steps", "ran"),
    [
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(1)),
                Step(run_at_spec(Y), Y + seconds(1)),
                Step(run_at_spec(X), Y + seconds(60)),
            ],
            [X, Y],
            id="x-y-x-y-ran",
        ),
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(1)),
                Step(run_at_spec(Y), X + seconds(600)),  # Y is still in the future
                Step(run_at_spec(X), X + seconds(700)),
            ],
            [X],
            id="x-y-x-y-not-run",
        ),
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(5)),
                Step(run_at_spec(X + seconds(1)), X + seconds(6)),
                Step(run_at_spec(X), X + seconds(7)),
            ],
            [X, X + seconds(1)],
            id="x-x+1s-x",
        ),
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(5)),
                Step(run_at_spec(X), X + seconds(3600), jobs_gone=False),  # no edit: no run
            ],
            [X],
            id="no-edit",
        ),
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(1)),
                Step(HOURLY, X + seconds(600)),
                Step(run_at_spec(X), X + seconds(1200)),
            ],
            [X],
            id="x-schedule-x",
        ),
        pytest.param(
            [
                Step(HOURLY, X + seconds(1)),  # 10:00 runs as a slot of the schedule
                Step(run_at_spec(X), X + seconds(600)),  # the same instant as a one-off
                Step(HOURLY, X + seconds(1200)),
                Step(HOURLY, X + seconds(3601)),
            ],
            [X, X + timedelta(hours=1)],
            id="schedule-x-schedule",
        ),
        pytest.param(
            [
                Step(HOURLY, X + seconds(1), jobs_gone=False),  # the slot's Job is still there
                Step(run_at_spec(X), X + seconds(600), jobs_gone=False),
            ],
            [X],
            id="schedule-then-its-slot-as-run-at",
        ),
        pytest.param(
            [
                Step(run_at_spec(X), X + seconds(1)),
                Step(run_at_spec(X, concurrencyPolicy="Sometimes"), X + seconds(60)),  # invalid
                Step(run_at_spec(X), X + seconds(120)),  # fixed: the same runAt as before
            ],
            [X],
            id="x-invalid-x",
        ),
        pytest.param(
            [
                Step(run_at_spec(Y), X),  # in the future: nothing processed yet
                Step(run_at_spec(X), X + seconds(2)),
                Step(run_at_spec(Y), Y + seconds(2)),
            ],
            [X, Y],
            id="never-processed-instants-run",
        ),
    ],
)
def test_no_instant_runs_twice_across_edits(steps: list[Step], ran: list[datetime]) -> None:
    played = play(steps)

    slots = [run.slot for run in played.runs if run.trigger == TRIGGER_SCHEDULE]
    assert slots == ran


@pytest.mark.parametrize(
    ("earlier", "reverted"),
    [
        pytest.param(X, X, id="revert-to-an-instant-that-ran"),
        pytest.param(X, X - seconds(1800), id="an-instant-before-the-cursor"),
    ],
)
def test_a_run_at_already_processed_is_skipped_and_said_so(
    earlier: datetime, reverted: datetime
) -> None:
    """The edit's decision records the instant as skipped (AlreadyProcessed, an Event naming the
    cursor) and the one-off as over; the cursor stays where it was."""
    played = play(
        [
            Step(run_at_spec(earlier), earlier + seconds(1)),
            Step(run_at_spec(Y), Y + seconds(1)),
            Step(run_at_spec(reverted), Y + seconds(60)),
        ]
    )

    last = played.last
    assert last.runs == []
    assert skip_counts(last) == {ALREADY: 1}
    [skipped] = [e for e in last.events if e.reason == f"Skipped{ALREADY}"]
    assert skipped.type == "Normal"
    assert format_time(reverted) in skipped.message
    assert format_time(Y) in skipped.message  # the cursor it is at or before
    assert last.status["processedUntil"] == format_time(Y)
    assert last.status["slotsSkipped"] == {ALREADY: 1}
    assert condition(last.status, "Completed")["status"] == "True"
    assert last.status["nextScheduleTime"] is None
    assert last.wake_at is None
    # Said once: the next decision has nothing to say.
    again = decide(played.sj, [], Y + seconds(120))
    assert again.runs == []
    assert again.events == []
    assert again.skips == []


def test_a_schedule_edit_never_moves_the_cursor_back() -> None:
    """A leader whose clock is behind the one that wrote processedUntil: the edit resumes from
    processedUntil, not from its own now, so the old schedule's last slot (10:00:30, named by
    seconds under both schedules) is not due again under the new one."""
    written = X + seconds(30)
    sj = view(spec(schedule="*/15 * * * * *"), status=processed(SECONDS, written))

    edited = decide(sj, [], X + seconds(10))
    later = decide(dataclasses.replace(sj, status=edited.status), [], X + seconds(40))

    assert edited.runs == []
    assert edited.status["processedUntil"] == format_time(written)
    assert [run.slot for run in later.runs] == []
    assert "slots before 2026-01-05T10:00:30Z" in edited.events[0].message


# --- the property: any sequence of edits, waits and deletions ---------------------------------

BASE = utc(2026, 1, 5, 10, 0)
# Few instants, so that edits come back to one; 6-field and 5-field schedules, whose Jobs are
# named by seconds (as a runAt's) and by minutes.
INSTANTS = [BASE + seconds(30 * k) for k in range(-2, 5)]
SCHEDULES = ["*/30 * * * * *", "*/15 * * * * *", "* * * * *", "*/2 * * * *"]


@st.composite
def edits(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if draw(st.booleans()):
        deadline = draw(st.sampled_from([5, 60, 600]))
        fields["startingDeadlineSeconds"] = deadline
    if draw(st.integers(0, 2)):
        return run_at_spec(draw(st.sampled_from(INSTANTS)), **fields)
    return spec(schedule=draw(st.sampled_from(SCHEDULES)), **fields)


actions = st.one_of(
    st.tuples(st.just("edit"), edits()),
    st.tuples(st.just("jobs-end"), st.just(True)),
    st.tuples(st.just("wait"), st.integers(1, 100)),
    st.tuples(st.just("jobs-end"), st.booleans()),
    st.tuples(st.just("clock-back"), st.integers(1, 20)),
)


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(first=edits(), start=st.integers(-90, 120), script=st.lists(actions, max_size=25))
def test_no_instant_ever_gets_two_runs_whatever_the_edits(
    first: dict[str, Any], start: int, script: list[tuple[str, Any]]
) -> None:
    """Edits of the trigger (runAt and schedules, back and forth), time passing (a leader's
    clock stepping back too), Jobs ending and vanishing: over the whole history, no instant has
    two scheduled runs, and processedUntil never goes back."""
    sj = view(first, created_at=BASE - seconds(120))
    now = BASE + seconds(start)
    jobs: list[JobInfo] = []
    ran: list[datetime] = []
    cursor: datetime | None = None
    for kind, value in [("wait", 0), *script]:
        if kind == "edit" and value != sj.spec:
            sj = dataclasses.replace(sj, spec=value, generation=sj.generation + 1)
        elif kind == "wait":
            now += seconds(value)
        elif kind == "jobs-end":
            jobs = [] if value else finished(jobs, now)
        elif kind == "clock-back":
            now -= seconds(value)
        decision = decide(sj, jobs, now)
        ran += [run.slot for run in decision.runs if run.trigger == TRIGGER_SCHEDULE]
        assert len(ran) == len(set(ran)), f"an instant ran twice: {sorted(map(format_time, ran))}"
        sj, jobs = after_apply(sj, jobs, decision)
        written = parse_time(sj.status.get("processedUntil"))
        if cursor is not None:
            assert written is not None, "processedUntil was dropped"
            assert written >= cursor, "processedUntil went back"
        cursor = written
        if ALREADY in (sj.status.get("slotsSkipped") or {}):
            event("an edit came back to an instant already processed")
    event(f"{len(ran)} run(s)")
