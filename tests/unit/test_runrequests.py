"""RunRequests (issue 15, item 4): replay and backfill are part of the pure decision.

The builders' ScheduledJob runs hourly from 08:30; the tests decide at 20:00 the same day, so
09:00..19:00 are past slots. A request's runs are the ScheduledJob's Jobs, with trigger Replay or
Backfill, named from the request's uid and the target's index.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    HOURLY,
    NAME,
    NAMESPACE,
    created_jobs,
    event_reasons,
    job,
    names,
    processed,
    spec,
    utc,
    view,
)
from hypothesis import given
from hypothesis import strategies as st
from shell import NOW as SHELL_NOW
from shell import SLOT, Shell

from cronlease import requestplan
from cronlease.applier import Outcome
from cronlease.decision import Decision, RequestTarget, ScheduledJobView
from cronlease.jobinfo import JobInfo, JobState
from cronlease.kube import JOBS, SCHEDULEDJOBS
from cronlease.naming import (
    DEAD_LETTER_REPLAYED,
    LABEL_DEAD_LETTER,
    LABEL_RETRIED,
    TRIGGER_BACKFILL,
    TRIGGER_REPLAY,
    attempt_job_name,
    format_time,
    request_job_name,
    scheduled_job_name,
)
from cronlease.reconcile import decide
from cronlease.requestplan import plan_waiting
from cronlease.runenv import idempotency_key
from cronlease.runrequest import (
    RequestAction,
    RequestError,
    RequestPolicy,
    RunRequestView,
    count,
    format_indexes,
    parse_indexes,
    parse_request_spec,
)

NOW = utc(2026, 1, 5, 20)
REQUEST_UID = "uid-fill"
RETRY = {"maxAttempts": 2, "backoff": {"initialSeconds": 10}}


def request(
    raw: dict[str, Any], status: dict[str, Any] | None = None, name: str = "fill"
) -> RunRequestView:
    return RunRequestView(
        name=name,
        namespace="team-a",
        uid=f"uid-{name}",
        version="1",
        created_at=utc(2026, 1, 5, 19, 59),
        spec={"scheduledJobName": NAME, **raw},
        status=status or {},
    )


def backfill(start: datetime, end: datetime, **fields: Any) -> dict[str, Any]:
    return {"backfill": {"from": format_time(start), "to": format_time(end)}, **fields}


def sj(**fields: Any) -> ScheduledJobView:
    raw = spec(**{"schedule": HOURLY, **fields})
    return view(raw, status=processed(raw, NOW))


class World:
    """The shell, as far as the core can tell: decisions applied to status, Jobs and requests.
    A run that was created finishes as `finish(job)` says before the next decision."""

    def __init__(self, scheduled: ScheduledJobView, *requests: RunRequestView) -> None:
        self.sj = scheduled
        self.jobs: list[JobInfo] = []
        self.requests = list(requests)
        self.created: list[JobInfo] = []

    def step(self, now: datetime = NOW, finish: JobState | None = JobState.SUCCEEDED) -> Decision:
        decision = decide(self.sj, self.jobs, now, self.requests)
        self.sj = dataclasses.replace(self.sj, status=decision.status)
        written = {write.ref.uid: write.status for write in decision.requests}
        self.requests = [
            dataclasses.replace(r, status=written.get(r.uid, r.status)) for r in self.requests
        ]
        new = created_jobs(decision)
        self.created += new
        released = {release.uid for release in decision.releases}
        labels = {(planned.uid, planned.label): planned.value for planned in decision.labels}
        self.jobs = [
            dataclasses.replace(
                j,
                held=j.held and j.uid not in released,
                retried=j.retried or (j.uid, LABEL_RETRIED) in labels,
                dead_letter=labels.get((j.uid, LABEL_DEAD_LETTER), "") == "true" or j.dead_letter,
                replayed=j.replayed
                or labels.get((j.uid, LABEL_DEAD_LETTER)) == DEAD_LETTER_REPLAYED,
            )
            for j in self.jobs
        ]
        for created in new:
            done = finish is not None
            self.jobs.append(
                dataclasses.replace(
                    created,
                    held=True,
                    state=finish if done else JobState.ACTIVE,
                    finished_at=now if done else None,
                )
            )
        return decision

    def accept(self) -> Decision:
        """The decision that accepts the requests: it fixes their targets and starts none."""
        decision = self.step()
        assert decision.runs == []
        return decision

    def status(self, name: str = "fill") -> dict[str, Any]:
        return next(r.status for r in self.requests if r.name == name)


# The request's spec, re-checked by the operator


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"replay": {"runs": ["a", "b"]}}, (RequestAction.REPLAY, ("a", "b"), False)),
        ({"replay": {"deadLetters": True}}, (RequestAction.REPLAY, (), True)),
        (backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)), (RequestAction.BACKFILL, (), False)),
    ],
)
def test_a_valid_request_is_parsed(raw: dict[str, Any], expected: tuple[Any, ...]) -> None:
    parsed = parse_request_spec({"scheduledJobName": NAME, **raw})
    assert (parsed.action, parsed.runs, parsed.dead_letters) == expected
    assert parsed.policy is RequestPolicy.FORBID


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({}, "spec: exactly one of replay and backfill"),
        (
            {"replay": {"deadLetters": True}, **backfill(NOW, NOW)},
            "spec: exactly one of replay and backfill",
        ),
        ({"replay": {}}, "spec.replay: name runs"),
        ({"replay": {"runs": ["a"], "deadLetters": True}}, "spec.replay: name runs"),
        ({"replay": {"runs": []}}, "spec.replay.runs:"),
        ({"replay": {"runs": ["a", "a"]}}, "spec.replay.runs: names a run twice"),
        ({"replay": {"runs": ["a", 7]}}, "spec.replay.runs[1]"),
        ({"replay": {"deadLetters": "yes"}}, "spec.replay.deadLetters"),
        (backfill(utc(2026, 1, 5, 10), utc(2026, 1, 5, 9)), "spec.backfill.to: before"),
        ({"backfill": {"from": "yesterday", "to": "2026-01-05T09:00:00Z"}}, "spec.backfill.from"),
        ({"backfill": {"from": "2026-01-05T09:00:00Z"}}, "spec.backfill.to: required"),
        ({"concurrencyPolicy": "Replace", **backfill(NOW, NOW)}, "spec.concurrencyPolicy"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_request_spec({"scheduledJobName": NAME, **raw})


@given(st.sets(st.integers(min_value=0, max_value=999)))
def test_indexes_round_trip_in_the_form_of_completed_indexes(indexes: set[int]) -> None:
    text = format_indexes(indexes)
    assert parse_indexes(text) == indexes
    assert " " not in text


def test_indexes_are_compressed_and_unreadable_ones_ignored() -> None:
    assert format_indexes([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert parse_indexes("0-2,x,5-3,999999999,8") == {0, 1, 2, 8}
    assert parse_indexes(None) == set()


# Backfill


def test_a_backfill_runs_each_slot_of_its_window_once_in_order() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 18))))
    first = world.accept()
    assert "RequestAccepted" in event_reasons(first)
    assert world.status()["total"] == 10
    for _ in range(12):
        world.step()
    slots = [j.slot for j in world.created]
    assert slots == [utc(2026, 1, 5, hour) for hour in range(9, 19)]
    assert len({j.name for j in world.created}) == 10
    assert {j.trigger for j in world.created} == {TRIGGER_BACKFILL}
    assert world.created[0].name == request_job_name(NAME, TRIGGER_BACKFILL, REQUEST_UID, 0)
    status = world.status()
    assert status["phase"] == "Complete"
    assert (status["succeeded"], status["failed"], status["active"]) == (10, 0, 0)
    assert status["succeededIndexes"] == "0-9"


def test_forbid_starts_one_target_at_a_time_and_only_when_no_run_is_active() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 11))))
    world.jobs.append(job("other", state=JobState.ACTIVE, slot=utc(2026, 1, 5, 19)))
    world.accept()
    world.step()
    assert world.created == []  # a run of the ScheduledJob is active
    world.jobs = []
    assert len(world.step(finish=None).runs) == 1
    assert world.step(finish=None).runs == []  # its own run is active
    assert world.status()["active"] == 1


def test_allow_starts_every_target_at_once() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 18), **ALLOW)))
    world.accept()
    assert len(world.step(finish=None).runs) == 10
    assert world.status()["started"] == 10


ALLOW = {"concurrencyPolicy": "Allow"}


def test_a_slot_whose_job_exists_is_recorded_not_created_again() -> None:
    """The create succeeded, the request's status write was lost (a crash, a failover)."""
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 10))))
    world.accept()
    accepted = world.status()
    first = world.step(finish=None)
    world.requests = [dataclasses.replace(r, status=accepted) for r in world.requests]  # lost
    again = world.step(finish=None)
    assert again.runs == []
    assert names(run for run, _ in again.recorded) == names(first.runs)
    assert world.status()["started"] == 1


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 21)), "spec.backfill.to: .* future"),
        (backfill(utc(2025, 1, 1), utc(2026, 1, 5, 9)), "spec.backfill: the window holds 8"),
        ({"replay": {"runs": ["nope"]}}, r"spec.replay.runs\[0\]: backup has no run"),
    ],
)
def test_a_request_that_cannot_be_carried_out_fails_once_with_one_event(
    raw: dict[str, Any], message: str
) -> None:
    world = World(sj(), request(raw))
    first = world.step()
    assert world.status()["phase"] == "Failed"
    assert re.search(message, world.status()["message"])
    assert event_reasons(first) == ["RequestFailed"]
    assert first.events[0].about == world.requests[0].ref
    second = world.step()
    assert (second.events, second.requests, world.created) == ([], [], [])


def test_an_empty_window_completes_at_once() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9, 10), utc(2026, 1, 5, 9, 20))))
    world.accept()
    world.step()
    assert (world.status()["phase"], world.status()["total"]) == ("Complete", 0)


def test_a_suspended_scheduledjob_starts_no_target_until_resumed() -> None:
    world = World(sj(suspend=True), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9))))
    world.accept()
    world.step()
    assert world.created == []
    assert world.status()["phase"] == "Running"


def test_a_schedule_edit_stops_the_backfill() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 12))))
    world.accept()
    world.step(finish=None)
    world.sj = dataclasses.replace(world.sj, spec={**world.sj.spec, "schedule": "30 * * * *"})
    decision = world.step(finish=None)
    assert world.status()["phase"] == "Failed"
    assert "schedule changed" in world.status()["message"]
    assert decision.runs == []


# Holding the request's Jobs until it has recorded them


def test_a_request_run_stays_held_and_kept_until_its_result_is_recorded() -> None:
    raw = backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 10))
    world = World(sj(successfulJobsHistoryLimit=0), request(raw))
    world.accept()
    world.step()  # index 0 created, and (in this world) succeeded at once
    target = world.jobs[0]
    recording = decide(world.sj, world.jobs, NOW, world.requests)
    # Its result is recorded now, in the status this decision writes: not yet released or
    # deleted by the history limit of 0.
    assert target.uid not in {r.uid for r in recording.releases}
    assert target.uid not in {d.uid for d in recording.deletions}
    world.step()
    assert world.status()["succeededIndexes"] == "0"
    later = decide(world.sj, world.jobs, NOW, world.requests)
    assert target.uid in {r.uid for r in later.releases}


def test_a_deleted_request_is_cancelled_its_jobs_released_and_nothing_more_started() -> None:
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 12))))
    world.accept()
    world.step(finish=None)
    held = world.jobs[0]
    world.requests = []
    decision = world.step()
    assert decision.runs == []
    assert held.uid in {r.uid for r in decision.releases}


# Replay


def dead_letter(slot: datetime, token: str | None = None) -> list[JobInfo]:
    run = scheduled_job_name(NAME, slot, with_seconds=False)
    common = {"slot": slot, "created_at": slot, "max_attempts": 2, "held": True}
    return [
        job(run, state=JobState.FAILED, finished_at=slot, retried=True, **common),
        job(
            attempt_job_name(NAME, run, 2),
            state=JobState.FAILED,
            finished_at=slot + timedelta(minutes=1),
            run=run,
            attempt=2,
            dead_letter=True,
            **common,
        ),
    ]


def test_a_replay_of_the_dead_letters_keeps_their_slots_and_idempotency_keys() -> None:
    letters = dead_letter(utc(2026, 1, 5, 9)) + dead_letter(utc(2026, 1, 5, 10))
    world = World(sj(retry=RETRY), request({"replay": {"deadLetters": True}}, name="again"))
    world.jobs = list(letters)
    world.accept()
    assert world.status("again")["total"] == 2
    assert [t["slot"] for t in world.status("again")["targets"]] == [
        "2026-01-05T09:00:00Z",
        "2026-01-05T10:00:00Z",
    ]
    first = world.step()
    (run,) = first.runs
    assert (run.trigger, run.slot) == (TRIGGER_REPLAY, utc(2026, 1, 5, 9))
    assert run.request == RequestTarget("again", "uid-again", 0)
    original = dataclasses.replace(run, trigger="Schedule", request=None, job_name=letters[0].name)
    assert idempotency_key("team-a", NAME, run) == idempotency_key("team-a", NAME, original)
    # The dead letter it replays is labelled replayed: history again, no longer a dead letter.
    assert [(p.job_name, p.label, p.value) for p in first.labels] == [
        (letters[1].name, LABEL_DEAD_LETTER, DEAD_LETTER_REPLAYED)
    ]


def test_a_replayed_dead_letter_is_history_again() -> None:
    letters = dead_letter(utc(2026, 1, 5, 9))
    letters[1] = dataclasses.replace(letters[1], dead_letter=False, replayed=True)
    decision = decide(sj(retry=RETRY), letters, NOW)
    assert "deadLetters" not in decision.status
    assert {r.uid for r in decision.releases} == {j.uid for j in letters}


def test_a_replay_names_a_run_by_its_name_or_any_of_its_jobs() -> None:
    letters = dead_letter(utc(2026, 1, 5, 9))
    for named in (letters[0].name, letters[1].name):
        world = World(sj(retry=RETRY), request({"replay": {"runs": [named]}}))
        world.jobs = list(letters)
        world.accept()
        assert names(world.step().runs) == [request_job_name(NAME, TRIGGER_REPLAY, REQUEST_UID, 0)]


def test_a_replay_run_that_fails_is_retried_and_dead_lettered_itself() -> None:
    world = World(sj(retry=RETRY), request({"replay": {"deadLetters": True}}))
    world.jobs = dead_letter(utc(2026, 1, 5, 9))
    world.accept()
    world.step(finish=JobState.FAILED)
    retry = world.step(NOW + timedelta(seconds=11), finish=JobState.FAILED)
    (second,) = retry.runs
    assert (second.attempt, second.trigger) == (2, TRIGGER_REPLAY)
    assert second.request == RequestTarget("fill", REQUEST_UID, 0)
    final = world.step(NOW + timedelta(seconds=30))
    assert "DeadLettered" in event_reasons(final)
    world.step(NOW + timedelta(seconds=31))
    assert world.status()["failedIndexes"] == "0"
    assert world.status()["phase"] == "Complete"


# The shell on the fake API server: exactly once per (request, target) across lost responses,
# crashes and a new leader


def complete(shell: Shell) -> None:
    """Every active Job of the fake completes, as the Job controller would say."""
    for obj in shell.jobs():
        if not (obj.get("status") or {}).get("conditions"):
            shell.server.edit(*JOBS, NAMESPACE, obj["metadata"]["name"], COMPLETE)


COMPLETE = {
    "status": {
        "completionTime": format_time(SHELL_NOW),
        "conditions": [{"type": "Complete", "status": "True"}],
    }
}


def created_for_request(shell: Shell) -> list[str]:
    return [name for name in shell.created_jobs() if name.startswith("report-b")]


async def test_each_target_runs_once_across_lost_writes_and_a_new_leader() -> None:
    shell = Shell(now=SHELL_NOW + timedelta(minutes=10))
    shell.create("report")
    window = {"from": format_time(SLOT), "to": format_time(SLOT + timedelta(minutes=4))}
    shell.request("fill", scheduledJobName="report", backfill=window, concurrencyPolicy="Allow")
    assert (await shell.apply("report")).outcome is Outcome.DONE  # accepted, nothing started
    assert shell.request_status("fill")["phase"] == "Running"
    # Every target's create succeeds, and the request's status write is lost with a crash.
    shell.server.lose("PATCH", r"runrequests/fill/status$")
    assert (await shell.apply("report")).outcome is Outcome.RETRY
    assert len(created_for_request(shell)) == 5
    leader = shell.successor()
    for _ in range(12):
        complete(leader)
        leader.model.upsert_scheduledjob(leader.server.get(*SCHEDULEDJOBS, NAMESPACE, "report"))
        for job_obj in leader.jobs():
            leader.model.upsert_job(job_obj)
        assert (await leader.apply("report")).outcome is Outcome.DONE
    created = created_for_request(shell)
    assert len(created) == len(set(created)) == 5
    status = leader.request_status("fill")
    assert (status["phase"], status["succeededIndexes"]) == ("Complete", "0-4")
    assert all(not obj["metadata"].get("finalizers") for obj in leader.jobs())


def test_a_request_for_a_missing_scheduledjob_waits_pending_then_starts() -> None:
    waiting = request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)))
    decision = plan_waiting(NAME, [waiting])
    (written,) = decision.requests
    assert written.status["phase"] == "Pending"
    assert "ScheduledJob backup not found" in written.status["message"]
    assert event_reasons(decision) == ["RequestPending"]
    pending = dataclasses.replace(waiting, status=written.status)
    assert plan_waiting(NAME, [pending]).requests == []  # said once
    world = World(sj(), pending)  # the ScheduledJob is applied after all
    world.accept()
    assert len(world.step().runs) == 1
    world.step()
    assert world.status()["phase"] == "Complete"


def test_a_running_request_whose_scheduledjob_is_deleted_fails() -> None:
    running = request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)), {"phase": "Running"})
    decision = plan_waiting(NAME, [running])
    (written,) = decision.requests
    assert (written.status["phase"], event_reasons(decision)) == ("Failed", ["RequestFailed"])
    assert "was deleted" in written.status["message"]


def test_an_accepted_request_is_never_judged_again_at_another_now() -> None:
    """Found by the model-based test: the target's Job was created in the decision that accepted
    the request, its status write was lost, and the next decision, at an earlier "now" (a clock
    stepped back), found the window in the future, failed the request and left its Job held
    forever. Acceptance is now a decision of its own; afterwards only the Jobs count."""
    world = World(sj(), request(backfill(utc(2026, 1, 5, 19), utc(2026, 1, 5, 19))))
    world.accept()
    assert len(world.step(NOW - timedelta(hours=2)).runs) == 1
    world.step(NOW - timedelta(hours=2))
    assert world.status()["phase"] == "Complete"


async def test_a_request_run_that_succeeded_counts_as_succeeded_whatever_deletes_it() -> None:
    """Without spec.retry too: a request's Job stays held until its request has recorded its
    result, and a TTL deleting a Job that succeeded does not make it a failure (found by review:
    the applier released request runs at their creation, as it does slots' runs)."""
    shell = Shell(now=SHELL_NOW + timedelta(minutes=10))
    shell.create("report")
    window = {"from": format_time(SLOT), "to": format_time(SLOT)}
    shell.request("fill", scheduledJobName="report", backfill=window, concurrencyPolicy="Allow")
    await shell.apply("report")  # accepted
    await shell.apply("report")  # its one target created
    (name,) = created_for_request(shell)
    assert shell.server.get(*JOBS, NAMESPACE, name)["metadata"]["finalizers"] == [
        "cronlease.io/slot-record"
    ]
    shell.server.edit(*JOBS, NAMESPACE, name, COMPLETE)
    shell.server.remove(*JOBS, NAMESPACE, name)  # TTL 0: marked for deletion, held
    shell.model.upsert_job(shell.server.get(*JOBS, NAMESPACE, name))
    await shell.apply("report")  # records the result
    await shell.apply("report")  # and releases it
    status = shell.request_status("fill")
    assert (status["phase"], status["succeededIndexes"]) == ("Complete", "0")
    assert shell.server.get(*JOBS, NAMESPACE, name) is None  # gone once released


def test_a_window_near_year_one_is_refused_naming_the_field() -> None:
    with pytest.raises(RequestError, match=r"spec\.backfill: the window must lie between"):
        parse_request_spec({"scheduledJobName": NAME, **backfill(utc(1, 1, 1), utc(2026, 1, 5, 9))})


def test_allow_never_overlaps_a_scheduledjob_whose_owner_forbids_it() -> None:
    raw = backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 18), **ALLOW)
    for policy, starts in (("Forbid", 1), ("Replace", 1), ("Allow", 10)):
        world = World(sj(concurrencyPolicy=policy), request(raw))
        world.accept()
        assert len(world.step(finish=None).runs) == starts, policy


def test_a_request_that_raises_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a request makes the planner raise, its ScheduledJob's slots go on, and nothing
    the request planned before raising stands."""
    world = World(sj(), request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 18), **ALLOW)))
    world.accept()
    real = requestplan._mark_replayed

    def broken(*args: Any) -> None:
        real(*args)
        raise ValueError("nobody foresaw this")

    monkeypatch.setattr(requestplan, "_mark_replayed", broken)
    due = dataclasses.replace(world.sj, status=processed(world.sj.spec, NOW - timedelta(hours=1)))
    decision = decide(due, [], NOW, world.requests)
    assert [run.trigger for run in decision.runs] == ["Schedule"]  # the 20:00 slot, only
    (failed,) = decision.requests
    assert failed.status["phase"] == "Failed"
    assert "ValueError" in failed.status["message"]
    assert event_reasons(decision).count("RequestFailed") == 1


def test_a_hostile_count_in_status_is_capped() -> None:
    assert count({"started": 10**15}, "started") == 1000
    assert count({"started": True}, "started") == 0


def test_under_cancel_other_a_target_waits_until_a_cancelled_run_is_gone() -> None:
    world = World(
        sj(concurrencyPolicy="CancelOther"),
        request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 11))),
    )
    cancelled = job("cancelled", state=JobState.ACTIVE, slot=utc(2026, 1, 5, 19), deleting=True)
    world.jobs.append(cancelled)
    world.accept()
    world.step()
    assert world.created == []  # its pods may still run
    world.jobs = []
    assert len(world.step(finish=None).runs) == 1
