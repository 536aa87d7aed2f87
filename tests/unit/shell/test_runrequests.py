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
from harness import NOW as SHELL_NOW
from harness import SLOT, Shell
from hypothesis import given
from hypothesis import strategies as st

from cronlease.core.bodies.runenv import idempotency_key
from cronlease.core.decide import requestplan
from cronlease.core.decide.decision import Decision, RequestTarget, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.requestplan import plan_waiting
from cronlease.core.decide.runrequest import (
    RequestAction,
    RequestError,
    RequestPolicy,
    RunRequestView,
    count,
    format_indexes,
    parse_indexes,
    parse_request_spec,
)
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
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
from cronlease.shell.applier import Outcome
from cronlease.shell.kube import JOBS, SCHEDULEDJOBS

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
    decision = plan_waiting(NAME, [waiting], NOW)
    (written,) = decision.requests
    assert written.status["phase"] == "Pending"
    assert "ScheduledJob backup not found" in written.status["message"]
    assert event_reasons(decision) == ["RequestPending"]
    pending = dataclasses.replace(waiting, status=written.status)
    assert plan_waiting(NAME, [pending], NOW).requests == []  # said once
    world = World(sj(), pending)  # the ScheduledJob is applied after all
    world.accept()
    assert len(world.step().runs) == 1
    world.step()
    assert world.status()["phase"] == "Complete"


def test_a_running_request_whose_scheduledjob_is_deleted_fails() -> None:
    running = request(backfill(utc(2026, 1, 5, 9), utc(2026, 1, 5, 9)), {"phase": "Running"})
    decision = plan_waiting(NAME, [running], NOW)
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


# Two replays of the same runs (issue 33, finding 10): `kubectl cronlease replay --dead-letters`
# twice while the first request still runs. Each run is replayed once; the later request's
# target is skipped, naming the request that holds it, unless that one never started it.

D1, D2 = utc(2026, 1, 5, 9), utc(2026, 1, 5, 10)
FIRST, SECOND = "again-1", "again-2"
LETTERS = {"replay": {"deadLetters": True}}


def replays_by_slot(world: World) -> dict[datetime, int]:
    """How many replays each original slot had (first attempts: a replay's retries are one run)."""
    counts: dict[datetime, int] = {}
    for created in world.created:
        if created.trigger == TRIGGER_REPLAY and created.attempt == 1:
            assert created.slot is not None
            counts[created.slot] = counts.get(created.slot, 0) + 1
    return counts


def letters_world(*requests: RunRequestView) -> World:
    world = World(sj(retry=RETRY), *requests)
    world.jobs = dead_letter(D1) + dead_letter(D2)
    return world


def finish(world: World, steps: int = 8) -> None:
    """Decisions until the requests are done, every run ending as it is created (and those
    left running before, at the first)."""
    for index in range(steps):
        now = NOW + timedelta(seconds=index + 1)
        world.jobs = [
            dataclasses.replace(j, state=JobState.SUCCEEDED, finished_at=now)
            if j.state is JobState.ACTIVE and j.name != "busy"
            else j
            for j in world.jobs
        ]
        world.step(now)


def blocker() -> JobInfo:
    """An unrelated active run: a Forbid request starts nothing while it runs."""
    return job("busy", state=JobState.ACTIVE, slot=utc(2026, 1, 5, 19))


def second_while_the_first_runs() -> World:
    world = letters_world(request(LETTERS, name=FIRST))
    world.accept()
    world.step(finish=None)  # the first replays D1; D2 waits (Forbid)
    world.requests.append(request(LETTERS, name=SECOND))
    return world


def both_at_once(policy: str = "Forbid") -> World:
    raw = {**LETTERS, "concurrencyPolicy": policy}
    world = letters_world(request(raw, name=FIRST), request(raw, name=SECOND))
    world.accept()
    return world


def first_deleted_before_the_second_came_to_them() -> World:
    """Deleted right after both were accepted: the second request runs what the first left."""
    world = letters_world(request(LETTERS, name=FIRST), request(LETTERS, name=SECOND))
    world.accept()
    world.requests = [r for r in world.requests if r.name != FIRST]
    return world


def first_deleted_after_starting_one() -> World:
    """The second skipped both while the first held them; the first is deleted after starting
    one: the other stays a dead letter (cancelled with the first), for a new request."""
    world = letters_world(request(LETTERS, name=FIRST), request(LETTERS, name=SECOND))
    world.accept()
    world.step(finish=None)  # the first replays D1
    world.requests = [r for r in world.requests if r.name != FIRST]
    return world


def first_failed_before_starting() -> World:
    world = letters_world(request(LETTERS, name=FIRST), request(LETTERS, name=SECOND))
    world.jobs.append(blocker())
    world.accept()
    broken = {**world.status(FIRST), "targets": "edited"}  # fails it: nothing more it starts
    world.requests = [
        dataclasses.replace(r, status=broken) if r.name == FIRST else r for r in world.requests
    ]
    world.step()
    assert world.status(FIRST)["phase"] == "Failed"
    world.jobs = [j for j in world.jobs if j.name != "busy"]
    return world


def a_named_replay_of_a_held_run() -> World:
    world = letters_world(request(LETTERS, name=FIRST))
    world.accept()
    named = {"replay": {"runs": [scheduled_job_name(NAME, D2, with_seconds=False)]}}
    world.requests.append(request(named, name=SECOND))
    return world


BOTH = {D1: 1, D2: 1}


@pytest.mark.parametrize(
    ("make", "replays", "skipped", "held"),
    [
        pytest.param(second_while_the_first_runs, BOTH, "0", [FIRST], id="second-while-first-runs"),
        pytest.param(both_at_once, BOTH, "0-1", [FIRST, FIRST], id="both-accepted-at-once"),
        pytest.param(lambda: both_at_once("Allow"), BOTH, "0-1", [FIRST, FIRST], id="both-allow"),
        pytest.param(
            first_deleted_before_the_second_came_to_them,
            BOTH,
            None,
            [FIRST, FIRST],
            id="first-deleted-at-once",
        ),
        pytest.param(
            first_deleted_after_starting_one, {D1: 1}, "0-1", [FIRST, FIRST], id="deleted-midway"
        ),
        pytest.param(first_failed_before_starting, BOTH, None, [FIRST, FIRST], id="first-failed"),
        pytest.param(a_named_replay_of_a_held_run, BOTH, "0", [FIRST], id="named-run-held"),
    ],
)
def test_two_replays_of_the_same_runs_replay_each_once(
    make: Any, replays: dict[datetime, int], skipped: str | None, held: list[str]
) -> None:
    world = make()
    finish(world)

    assert replays_by_slot(world) == replays
    second = world.status(SECOND)
    assert second["phase"] == "Complete"
    assert [t.get("heldBy", {}).get("name") for t in second["targets"]] == held
    assert second.get("skippedIndexes") == skipped
    count_skipped = len(parse_indexes(skipped))
    assert second["skipped"] == count_skipped
    assert second["succeeded"] + second["failed"] + second["skipped"] == second["total"]
    if skipped:
        assert f"{count_skipped} skipped: replayed by another request" in second["message"]


def test_a_skipped_target_is_said_once_naming_the_request_that_holds_it() -> None:
    world = letters_world(request(LETTERS, name=FIRST), request(LETTERS, name=SECOND))
    events = []
    for index in range(8):
        decision = world.step(NOW + timedelta(seconds=index + 1))
        events += [e for e in decision.events if e.about and e.about.name == SECOND]
    skips = [e for e in events if e.reason == "SkippedAlreadyRequested"]
    assert [e.type for e in skips] == ["Normal", "Normal"]
    assert all(f"request {FIRST} replays it" in e.message for e in skips)
    run = scheduled_job_name(NAME, D1, with_seconds=False)
    assert f"target 0 (run {run}, slot 2026-01-05T09:00:00Z) not run" in skips[0].message
    accepted = next(e for e in events if e.reason == "RequestAccepted")
    assert f"2 of them being replayed by request {FIRST}" in accepted.message


def test_a_holder_whose_replay_failed_still_holds_the_run_and_leaves_a_new_dead_letter() -> None:
    """The first replay of D1 fails every attempt: D1 was replayed once (it is history), its
    replay is the dead letter now, and the second request skips D1; a third request made
    afterwards replays the new dead letter."""
    world = letters_world(request({"replay": {"runs": [scheduled_job_name(NAME, D1, False)]}}))
    world.accept()
    world.step(finish=JobState.FAILED)  # the replay's attempt 1 fails
    world.requests.append(request({"replay": {"runs": [world.jobs[0].name]}}, name=SECOND))
    world.step(NOW + timedelta(seconds=11), finish=JobState.FAILED)  # attempt 2 fails
    finish(world)
    assert replays_by_slot(world) == {D1: 1}
    assert world.status(SECOND)["skippedIndexes"] == "0"
    letters = [letter["run"] for letter in world.sj.status["deadLetters"]]
    assert request_job_name(NAME, TRIGGER_REPLAY, REQUEST_UID, 0) in letters
    world.requests.append(request(LETTERS, name="again-3"))
    finish(world)
    assert replays_by_slot(world) == {D1: 2, D2: 1}  # the new dead letter, and D2 at last


def test_a_replay_of_a_run_no_longer_being_replayed_runs_it_again() -> None:
    """Asked by name after the first replay ended: a new request, not an overlap."""
    run = scheduled_job_name(NAME, D1, with_seconds=False)
    world = letters_world(request({"replay": {"runs": [run]}}, name=FIRST))
    world.accept()
    finish(world)
    world.requests.append(request({"replay": {"runs": [run]}}, name=SECOND))
    finish(world)
    assert replays_by_slot(world) == {D1: 2}
    assert "heldBy" not in world.status(SECOND)["targets"][0]


@pytest.mark.parametrize(
    "held_by",
    [
        "request-a",
        {"name": "a", "uid": "u", "index": -1},
        {"name": "a", "uid": "u", "index": True},
        {"name": "", "uid": "u", "index": 0},
        {"name": "a", "index": 0},
    ],
)
def test_an_unreadable_holder_in_status_fails_the_request(held_by: object) -> None:
    world = letters_world(request(LETTERS, name=FIRST))
    world.accept()
    status = world.status(FIRST)
    status["targets"][0]["heldBy"] = held_by
    world.step()
    assert world.status(FIRST)["phase"] == "Failed"
    assert world.created == []


def test_a_dead_letter_replayed_meanwhile_is_skipped_by_a_request_from_before_this_rule() -> None:
    """Two replays of the same dead letter accepted before targets recorded their holder (an
    operator upgraded while they ran): the one that comes to it second finds it relabelled."""
    run = scheduled_job_name(NAME, D1, with_seconds=False)
    accepted = {
        "phase": "Running",
        "total": 1,
        "started": 0,
        "targets": [{"run": run, "slot": format_time(D1)}],
    }
    world = World(
        sj(retry=RETRY),
        request(LETTERS, dict(accepted), name=FIRST),
        request(LETTERS, dict(accepted), name=SECOND),
    )
    world.jobs = dead_letter(D1)
    world.step(finish=None)  # the first replays it (Forbid: the second waits)
    decision = world.step(finish=None)  # the first's run goes on; the dead letter is relabelled
    finish(world)
    assert replays_by_slot(world) == {D1: 1}
    assert world.status(SECOND)["skippedIndexes"] == "0"
    (skip,) = [e for e in decision.events if e.reason == "SkippedAlreadyReplayed"]
    assert "it is a dead letter no more" in skip.message


def test_a_run_named_twice_by_its_jobs_is_refused_not_replayed_twice() -> None:
    letters = dead_letter(D1)
    world = World(sj(retry=RETRY), request({"replay": {"runs": [j.name for j in letters]}}))
    world.jobs = list(letters)
    world.step()
    assert world.status()["phase"] == "Failed"
    assert "names already: a run is replayed once" in world.status()["message"]
    assert world.created == []


def test_a_holder_accepted_again_with_other_targets_no_longer_holds_the_run() -> None:
    """The first request's acceptance was lost while the second's (naming it as holder) was
    written; accepted again, its dead letters have moved (D1 was replayed meanwhile): its index
    0 is D2 now. The second no longer takes it for D1's or D2's holder (the index names another
    run, or none); the first, accepted again, finds D2 held by the second. D2 runs once."""
    world = letters_world(request(LETTERS, name=FIRST), request(LETTERS, name=SECOND))
    world.accept()
    assert [t["heldBy"]["index"] for t in world.status(SECOND)["targets"]] == [0, 1]
    world.requests = [
        dataclasses.replace(r, status={}) if r.name == FIRST else r for r in world.requests
    ]  # the first's acceptance is lost
    world.jobs[1] = dataclasses.replace(world.jobs[1], dead_letter=False, replayed=True)  # D1
    world.step()
    (target,) = world.status(FIRST)["targets"]
    assert (target["run"], target["heldBy"]["name"]) == (world.jobs[2].name, SECOND)
    finish(world)
    assert replays_by_slot(world) == {D2: 1}
    assert world.status(SECOND)["skippedIndexes"] == "0"  # D1: replayed meanwhile
    assert world.status(FIRST)["skippedIndexes"] == "0"  # D2: the second replays it
