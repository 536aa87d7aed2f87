"""spec.pauseOnFailure (issue 16): runs that fail in a row pause scheduling, a condition and not a
spec edit; the cronlease.io/resume annotation lifts it. Decisions are chained as the shell would
apply them: status written, Jobs created, then finished."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import World, condition, event_reasons, processed, spec, utc, view

from cronlease.core.decide.pausing import update_pause
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import ANNOTATION_RESUME
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import parse_spec

H = [utc(2026, 1, 5, hour) for hour in range(24)]  # the hourly slots of Monday 2026-01-05
PAUSING = spec(pauseOnFailure={"consecutiveFailures": 2}, startingDeadlineSeconds=600)


def minutes(slot: datetime, count: int) -> datetime:
    return slot + timedelta(minutes=count)


def test_two_failures_in_a_row_pause_and_a_resume_lifts_the_pause() -> None:
    world = World(PAUSING)
    assert [run.slot for run in world.decide(H[9]).runs] == [H[9]]
    world.finish(JobState.FAILED, minutes(H[9], 5))
    first = world.decide(minutes(H[9], 5))
    assert first.status["consecutiveFailures"] == 1
    assert "Paused" not in event_reasons(first)
    assert [run.slot for run in world.decide(H[10]).runs] == [H[10]]
    world.finish(JobState.FAILED, minutes(H[10], 5))

    paused = world.decide(minutes(H[10], 5))
    assert paused.status["consecutiveFailures"] == 2
    assert condition(paused.status, "Paused")["status"] == "True"
    assert condition(paused.status, "Paused")["reason"] == "ConsecutiveFailures"
    assert event_reasons(paused).count("Paused") == 1
    # No wake-up for the slots of the pause, and no next slot to show.
    assert paused.wake_at is None
    assert paused.status["nextScheduleTime"] is None
    # The next decision (any event) records the slots that came due as skipped, runs none.
    during = world.decide(minutes(H[12], 1))
    assert during.runs == []
    assert during.status["slotsSkipped"] == {"Paused": 2}
    assert "Paused" not in event_reasons(during)  # said once

    world.annotate(ANNOTATION_RESUME, "1")
    resumed = world.decide(minutes(H[12], 2))
    assert condition(resumed.status, "Paused")["status"] == "False"
    assert resumed.status["resumeToken"] == "1"
    assert resumed.status["consecutiveFailures"] == 0
    assert "Resumed" in event_reasons(resumed)
    assert resumed.runs == []  # resuming runs nothing retroactively
    assert resumed.wake_at == H[13]
    assert [run.slot for run in world.decide(H[13]).runs] == [H[13]]
    # The same annotation value again changes nothing.
    assert "Resumed" not in event_reasons(world.decide(minutes(H[13], 1)))


def test_a_success_resets_the_streak() -> None:
    world = World(PAUSING)
    for hour, state in ((9, JobState.FAILED), (10, JobState.SUCCEEDED), (11, JobState.FAILED)):
        world.decide(H[hour])
        world.finish(state, minutes(H[hour], 5))
    decision = world.decide(minutes(H[11], 5))
    assert decision.status["consecutiveFailures"] == 1
    assert "Paused" not in [item["type"] for item in decision.status["conditions"]]
    assert [run.slot for run in world.decide(H[12]).runs] == [H[12]]


def test_a_slot_due_in_the_decision_that_pauses_is_skipped() -> None:
    """The second failure and the next slot are seen together: the slot does not run."""
    world = World(PAUSING)
    world.decide(H[9])
    world.finish(JobState.FAILED, minutes(H[9], 5))
    world.decide(H[10])
    world.finish(JobState.FAILED, minutes(H[10], 59))
    decision = world.decide(H[11])
    assert decision.runs == []
    assert decision.status["slotsSkipped"] == {"Paused": 1}


def test_without_pause_on_failure_nothing_is_counted() -> None:
    world = World(spec())
    world.decide(H[9])
    world.finish(JobState.FAILED, minutes(H[9], 5))
    decision = world.decide(minutes(H[9], 5))
    assert "consecutiveFailures" not in decision.status
    assert "Paused" not in str(decision.status.get("conditions"))


def test_removing_pause_on_failure_lifts_the_pause() -> None:
    status: dict[str, Any] = {}
    assert update_pause(1, ["Failed"], None, status, 1, H[9])[0] is True
    paused, events = update_pause(0, [], None, status, 2, H[10])
    assert paused is False
    assert condition(status, "Paused")["reason"] == "PauseOnFailureUnset"
    assert [event.reason for event in events] == ["Resumed"]
    assert "consecutiveFailures" not in status


@pytest.mark.parametrize(
    ("ended", "streak"),
    [
        (["Failed", "DeadLettered"], 2),
        (["Failed", "Succeeded", "Failed"], 1),
        (["Failed", "Deleted", "Failed"], 2),  # a deleted run counts for neither
        (["Replayed"], 0),
    ],
)
def test_the_streak(ended: list[str], streak: int) -> None:
    status: dict[str, Any] = {}
    update_pause(100, ended, None, status, 1, H[9])
    assert status["consecutiveFailures"] == streak


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"consecutiveFailures": 0}, "from 1 to 100, not 0"),
        ({"consecutiveFailures": 101}, "from 1 to 100, not 101"),
        ({}, "from 1 to 100, not 0"),
        ({"consecutiveFailures": "3"}, "must be an integer"),
        (3, "spec.pauseOnFailure: must be an object"),
    ],
)
def test_bad_pause_on_failure_names_the_field(value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("backup", spec(pauseOnFailure=value))
    assert message in str(caught.value)
    assert str(caught.value).startswith("spec.pauseOnFailure")


def test_slots_of_the_pause_are_skipped_by_the_decision_that_resumes() -> None:
    world = World(PAUSING)
    for hour in (9, 10):
        world.decide(H[hour])
        world.finish(JobState.FAILED, minutes(H[hour], 5))
    world.decide(minutes(H[10], 5))  # paused
    world.annotate(ANNOTATION_RESUME, "resume-1")
    resumed = world.decide(minutes(H[12], 1))  # 11:00 and 12:00 came due during the pause
    assert resumed.runs == []
    assert resumed.status["slotsSkipped"] == {"Paused": 2}
    assert condition(resumed.status, "Paused")["status"] == "False"


def test_a_failed_run_deleted_at_once_counts_as_a_failure() -> None:
    """ttlSecondsAfterFinished: 0 deletes a failed Job at once: it failed all the same."""
    world = World(spec(pauseOnFailure={"consecutiveFailures": 1}))
    world.decide(H[9])
    world.jobs = [
        dataclasses.replace(job, state=JobState.FAILED, finished_at=H[9], deleting=True)
        for job in world.jobs
    ]
    decision = world.decide(minutes(H[9], 1))
    assert decision.status["consecutiveFailures"] == 1
    assert condition(decision.status, "Paused")["status"] == "True"


def test_unfinished_runs_outlast_finished_ones_in_recent_runs() -> None:
    """Eleven runs, one a minute; all but the oldest end quickly. The oldest's entry stays in
    recentRuns (the oldest finished one goes instead), so its failure is counted when it ends."""
    world = World(spec(schedule="* * * * *", pauseOnFailure={"consecutiveFailures": 1}))
    world.sj = view(world.sj.spec, status=processed(world.sj.spec, minutes(H[9], -1)))
    oldest = ""
    for minute in range(11):
        decision = world.decide(minutes(H[9], minute))
        oldest = oldest or decision.runs[0].job_name
        world.jobs = [
            dataclasses.replace(job, state=JobState.SUCCEEDED, finished_at=minutes(H[9], minute))
            if job.name != oldest and not job.finished
            else job
            for job in world.jobs
        ]
    entries = world.sj.status["recentRuns"]
    assert len(entries) == 10
    assert [entry["result"] for entry in entries if entry["job"] == oldest] == ["Active"]
    world.jobs = [
        dataclasses.replace(job, state=JobState.FAILED, finished_at=minutes(H[9], 11))
        if job.name == oldest
        else job
        for job in world.jobs
    ]
    decision = world.decide(minutes(H[9], 11) + timedelta(seconds=5))
    assert condition(decision.status, "Paused")["status"] == "True"
