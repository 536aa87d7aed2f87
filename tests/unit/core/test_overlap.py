"""Overlap policies and catch-up (issue 16): BufferOne, BufferAll, CancelOther and catchUp, as
decide() plans them, every slot run or recorded. The builders' hourly schedule: slots at H[h]."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest
from builders import (
    World,
    after_apply,
    processed,
    seconds,
    skip_counts,
    slot_job,
    spec,
    utc,
    view,
)

from cronlease.core.decide.decision import DeletionReason
from cronlease.core.decide.overlap import QueuePlan, plan_queue
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import ANNOTATION_RUN_NOW
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import ConcurrencyPolicy, parse_spec

H = [utc(2026, 1, 5, hour) for hour in range(24)]
ONE, ALL, CANCEL = (
    ConcurrencyPolicy.BUFFER_ONE,
    ConcurrencyPolicy.BUFFER_ALL,
    ConcurrencyPolicy.CANCEL_OTHER,
)


# --- the queue, policy x state ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "queue", "busy", "clearing", "expected"),
    [
        (ONE, [], True, False, QueuePlan()),
        (ONE, [H[1]], False, False, QueuePlan(start=H[1])),
        (ONE, [H[1]], True, False, QueuePlan(waiting=[H[1]])),
        (ONE, [H[1], H[2], H[3]], True, False, QueuePlan(waiting=[H[1]], full=[H[2], H[3]])),
        (ONE, [H[1], H[2], H[3]], False, False, QueuePlan(H[1], [H[2]], [H[3]])),
        (ALL, [H[1], H[2], H[3]], True, False, QueuePlan(waiting=[H[1], H[2]], full=[H[3]])),
        (ALL, [H[1], H[2], H[3]], False, False, QueuePlan(start=H[1], waiting=[H[2], H[3]])),
        (ALL, [H[1]], False, True, QueuePlan(start=H[1])),  # only CancelOther waits for deletes
        (CANCEL, [H[1], H[2]], False, False, QueuePlan(start=H[2], superseded=[H[1]])),
        (CANCEL, [H[2]], True, False, QueuePlan(waiting=[H[2]], cancel=True)),
        (CANCEL, [H[2]], False, True, QueuePlan(waiting=[H[2]])),
        (CANCEL, [H[1], H[2]], True, True, QueuePlan(None, [H[2]], [], [H[1]], True)),
    ],
)
def test_plan_queue(
    policy: ConcurrencyPolicy,
    queue: list[datetime],
    busy: bool,
    clearing: bool,
    expected: QueuePlan,
) -> None:
    assert plan_queue(policy, 2, queue, busy, clearing) == expected


# --- decide(), chained as the shell applies it --------------------------------------------------


def long_run() -> list[JobInfo]:
    return [slot_job(H[9])]  # the 09:00 run, still active


def test_buffer_one_runs_one_waiting_slot_when_the_run_ends() -> None:
    world = World(spec(concurrencyPolicy="BufferOne"), long_run())
    waits = world.decide(H[10])
    assert waits.runs == []
    assert waits.status["buffered"] == ["2026-01-05T10:00:00Z"]
    full = world.decide(H[11])
    assert full.runs == []
    assert skip_counts(full) == {"BufferFull": 1}
    assert full.status["buffered"] == ["2026-01-05T10:00:00Z"]
    world.finish(JobState.SUCCEEDED, H[11] + seconds(30), slot=H[9])
    starts = world.decide(H[11] + seconds(30))
    assert [(run.slot, run.start) for run in starts.runs] == [(H[10], H[11] + seconds(30))]
    assert "buffered" not in starts.status


def test_buffer_all_keeps_the_oldest_and_runs_them_in_order() -> None:
    world = World(spec(concurrencyPolicy="BufferAll", bufferLimit=2), long_run())
    for hour in (10, 11, 12):
        world.decide(H[hour])
    assert world.sj.status["buffered"] == ["2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z"]
    assert world.sj.status["slotsSkipped"] == {"BufferFull": 1}
    started = []
    for slot in (H[9], H[10], H[11]):
        world.finish(JobState.SUCCEEDED, H[12] + seconds(10), slot=slot)
        started += [run.slot for run in world.decide(H[12] + seconds(10)).runs]
    assert started == [H[10], H[11]]
    assert "buffered" not in world.sj.status


def test_a_buffered_slot_past_its_deadline_is_recorded_not_run() -> None:
    world = World(spec(concurrencyPolicy="BufferOne", startingDeadlineSeconds=600), long_run())
    world.decide(H[10])
    world.finish(JobState.SUCCEEDED, H[10] + seconds(601 + 1), slot=H[9])
    late = world.decide(H[10] + seconds(602))
    assert late.runs == []
    assert skip_counts(late) == {"DeadlineExceeded": 1}
    assert "buffered" not in late.status


def test_cancel_other_deletes_waits_until_gone_then_starts() -> None:
    world = World(spec(concurrencyPolicy="CancelOther"), long_run())
    cancels = world.decide(H[10])
    assert cancels.runs == []
    assert [(d.job_name, d.reason) for d in cancels.deletions] == [
        (long_run()[0].name, DeletionReason.CANCEL_OTHER)
    ]
    assert cancels.status["buffered"] == ["2026-01-05T10:00:00Z"]
    still = world.decide(H[10] + seconds(5))  # the deleted run's pods are still going
    assert (still.runs, still.deletions) == ([], [])
    world.gone()
    starts = world.decide(H[10] + seconds(9))
    assert [run.slot for run in starts.runs] == [H[10]]


def test_cancel_other_keeps_only_the_newest_waiting_slot() -> None:
    world = World(spec(concurrencyPolicy="CancelOther"), long_run())
    world.decide(H[10])
    newer = world.decide(H[11])
    assert skip_counts(newer) == {"Superseded": 1}
    assert newer.status["buffered"] == ["2026-01-05T11:00:00Z"]


def test_a_run_now_is_refused_while_a_cancelled_run_is_still_going() -> None:
    world = World(spec(concurrencyPolicy="CancelOther"), long_run())
    world.decide(H[10])
    world.annotate(ANNOTATION_RUN_NOW, "1")
    refused = world.decide(H[10] + seconds(1))
    assert refused.runs == []
    assert "RunNowForbidden" in [event.reason for event in refused.events]


def test_a_buffered_slot_whose_job_exists_is_recorded_once() -> None:
    """The start was made but its status write was lost: the Job is the record."""
    raw = spec(concurrencyPolicy="BufferOne")
    status = processed(raw, H[10], buffered=["2026-01-05T10:00:00Z"])
    decision = decide(view(raw, status=status), [slot_job(H[10])], H[10] + seconds(40))
    assert decision.runs == []
    assert [run.slot for run, _ in decision.recorded] == [H[10]]
    assert "buffered" not in decision.status


def test_a_waiting_slots_job_stays_held_until_the_slot_leaves_the_list() -> None:
    raw = spec(concurrencyPolicy="BufferOne")
    status = processed(raw, H[10], buffered=["2026-01-05T10:00:00Z"])
    started = dataclasses.replace(slot_job(H[10]), held=True)
    decision = decide(view(raw, status=status), [started], H[10] + seconds(40))
    assert decision.releases == []  # the persisted status still lists the slot as waiting


# --- catch-up -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "catch_up", "runs", "skips"),
    [
        ("Allow", "All", [H[9], H[10], H[11]], {}),
        ("Allow", "Latest", [H[11]], {"Superseded": 2}),
        ("Allow", None, [H[9], H[10], H[11]], {}),  # unset: all, under Allow with a deadline
        ("Forbid", "All", [H[9]], {"ConcurrencyForbid": 2}),
        ("Forbid", None, [H[11]], {"Superseded": 2}),
        ("BufferOne", "All", [H[9]], {"BufferFull": 1}),
        ("BufferAll", "All", [H[9]], {}),
        ("BufferAll", "Latest", [H[11]], {"Superseded": 2}),
        ("Replace", "All", [H[11]], {"Superseded": 2}),
        ("CancelOther", "All", [H[11]], {"Superseded": 2}),
    ],
)
def test_catch_up_after_an_outage(
    policy: str, catch_up: str | None, runs: list[datetime], skips: dict[str, int]
) -> None:
    """The operator was down from 08:59 to 11:05: three timely slots (deadline 3 h)."""
    raw = spec(concurrencyPolicy=policy, catchUp=catch_up, startingDeadlineSeconds=10_800)
    decision = decide(view(raw, status=processed(raw, H[8])), [], H[11] + seconds(300))
    assert [run.slot for run in decision.runs] == runs
    assert skip_counts(decision) == skips
    waiting = {"BufferOne": 1, "BufferAll": 2}.get(policy, 0) if catch_up == "All" else 0
    assert len(decision.status.get("buffered") or []) == waiting


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("concurrencyPolicy", "Skip", "must be Allow, Forbid, Replace, BufferOne, BufferAll or"),
        ("catchUp", "Some", "spec.catchUp: must be Latest or All, not 'Some'"),
        ("bufferLimit", 1001, "spec.bufferLimit: must be an integer from 1 to 1000, not 1001"),
        ("bufferLimit", 0, "spec.bufferLimit: must be an integer from 1 to 1000, not 0"),
    ],
)
def test_bad_policy_fields_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("backup", spec(**{field: value}))
    assert message in str(caught.value)


# --- found in review -----------------------------------------------------------------------------


def test_a_waiting_slot_started_before_a_naming_edit_is_recorded_not_run_again() -> None:
    """The start of 10:00 was made, its status write lost to the user's edit, which names Jobs
    by the second from now on: the Job is found by its slot, and 10:00 never starts again."""
    raw = spec(concurrencyPolicy="BufferOne")
    sj = view(raw, status=processed(raw, H[9], buffered=["2026-01-05T10:00:00Z"]))
    started = decide(sj, [], H[10] + seconds(360))
    assert [run.slot for run in started.runs] == [H[10]]
    _, jobs = after_apply(sj, [], started)  # the Job exists; sj keeps the status as persisted
    edited = dataclasses.replace(sj, spec=dict(raw, schedule="0 0 * * * *"), generation=2)
    after_edit = decide(edited, jobs, H[10] + seconds(420))
    assert after_edit.runs == []
    assert [job.name for _, job in after_edit.recorded] == [started.runs[0].job_name]
    assert "buffered" not in after_edit.status


def test_slots_waiting_before_a_schedule_edit_do_not_run() -> None:
    raw = spec(concurrencyPolicy="BufferOne")
    sj = view(raw, status=processed(raw, H[10], buffered=["2026-01-05T10:00:00Z"]))
    edited = dataclasses.replace(sj, spec=dict(raw, schedule="30 * * * *"), generation=2)
    decision = decide(edited, [], H[10] + seconds(60))
    assert decision.runs == []
    assert skip_counts(decision) == {"Superseded": 1}
    assert "ScheduleChanged" in [event.reason for event in decision.events]


def test_cancel_other_gives_the_run_it_ends_no_next_attempt() -> None:
    raw = spec(concurrencyPolicy="CancelOther", retry={"maxAttempts": 3})
    failed = dataclasses.replace(
        slot_job(H[9], state=JobState.FAILED, finished_at=H[9] + seconds(60), max_attempts=3),
        held=True,
    )
    decision = decide(view(raw, status=processed(raw, H[9])), [failed], H[10] + seconds(1))
    assert [d.job_name for d in decision.deletions] == [failed.name]
    assert decision.runs == []  # no attempt 2 of the run it cancels; 10:00 waits until it is gone


def test_cancel_other_never_cancels_a_run_now_it_let_start() -> None:
    """A run-now and a slot in one decision: the slot starts, the run-now waits (and is refused
    while the slot's run is active, as under Forbid) instead of starting only to be cancelled."""
    raw = spec(concurrencyPolicy="CancelOther")
    world = World(raw)
    world.annotate(ANNOTATION_RUN_NOW, "t1")
    first = world.decide(H[9] + seconds(1))
    assert [run.trigger for run in first.runs] == ["Schedule"]
    second = world.decide(H[9] + seconds(2))
    assert second.deletions == []
    assert "RunNowForbidden" in [event.reason for event in second.events]
