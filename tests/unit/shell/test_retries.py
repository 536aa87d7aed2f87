"""Retries and dead letters (issue 15): attempt planning is part of the pure decision.

The builders' ScheduledJob runs hourly; its 09:00 slot is recorded, and its first attempt (the
Job named for the slot) failed at 09:01. Backoff: 10 s, doubling, at most 60 s; 3 attempts.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    HOURLY,
    NAME,
    NAMESPACE,
    after_apply,
    condition,
    event_reasons,
    job,
    names,
    processed,
    run_at_spec,
    skip_counts,
    spec,
    utc,
    view,
)
from harness import Shell

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import DeletionReason, PlannedRun, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobInfo, JobState, job_info
from cronlease.core.names.naming import (
    FINALIZER_SLOT_RECORD,
    LABEL_ATTEMPT,
    LABEL_DEAD_LETTER,
    LABEL_RUN,
    attempt_job_name,
    format_time,
    scheduled_job_name,
)
from cronlease.core.specs.policies import RetryPolicy, SpecError
from cronlease.core.specs.spec import parse_spec
from cronlease.shell.kube import JOBS

SLOT = utc(2026, 1, 5, 9)
RUN = scheduled_job_name(NAME, SLOT, with_seconds=False)
RETRY = {"maxAttempts": 3, "backoff": {"initialSeconds": 10, "factor": 2, "maxSeconds": 60}}


def at(minute: int, second: int = 0) -> datetime:
    return SLOT + timedelta(minutes=minute, seconds=second)


def retrying(**fields: Any) -> dict[str, Any]:
    return spec(**{"schedule": HOURLY, "retry": RETRY, **fields})


def sj(raw: dict[str, Any] | None = None, **status: Any) -> ScheduledJobView:
    raw = raw or retrying()
    return view(raw, status=processed(raw, SLOT, **status))


def attempt(n: int, state: JobState, finished: datetime | None = None, **fields: Any) -> JobInfo:
    name = attempt_job_name(NAME, RUN, n)
    return job(
        name,
        state=state,
        slot=SLOT,
        run=RUN if n > 1 else "",
        attempt=n,
        created_at=SLOT,
        finished_at=finished,
        held=True,
        **{"max_attempts": 3, **fields},
    )


def test_the_delay_grows_by_the_factor_up_to_the_maximum() -> None:
    policy = RetryPolicy(max_attempts=6, initial_seconds=10, factor=2, max_seconds=60)
    assert [policy.delay(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    assert RetryPolicy(initial_seconds=5, factor=1).delay(9) == 5
    assert RetryPolicy(factor=10, max_seconds=86_400).delay(10**6) == 86_400  # no overflow


def test_a_failed_attempt_is_retried_once_its_delay_has_passed() -> None:
    failed = attempt(1, JobState.FAILED, at(1))
    early = decide(sj(), [failed], at(1, 9))
    assert early.runs == []
    assert early.wake_at == at(1, 10)
    assert early.releases == []  # the run goes on: its attempts stay held

    due = decide(sj(), [failed], at(1, 10))
    assert due.runs == [
        PlannedRun(attempt_job_name(NAME, RUN, 2), SLOT, "Schedule", None, 2, RUN, 3)
    ]
    assert "RunRetrying" in event_reasons(due)
    assert due.releases == []


def test_the_second_delay_doubles_and_the_third_failure_is_a_dead_letter() -> None:
    jobs = [attempt(1, JobState.FAILED, at(1)), attempt(2, JobState.FAILED, at(2))]
    assert decide(sj(), jobs, at(2, 19)).wake_at == at(2, 20)
    third = decide(sj(), jobs, at(2, 20))
    assert names(third.runs) == [attempt_job_name(NAME, RUN, 3)]

    jobs.append(attempt(3, JobState.FAILED, at(4)))
    final = decide(sj(), jobs, at(5))
    assert final.runs == []
    assert [(p.job_name, p.label) for p in final.labels] == [
        (RUN, "cronlease.io/retried"),  # each attempt that was retried is marked so
        (attempt_job_name(NAME, RUN, 2), "cronlease.io/retried"),
        (attempt_job_name(NAME, RUN, 3), "cronlease.io/dead-letter"),
    ]
    assert "DeadLettered" in event_reasons(final)
    assert final.deletions == []  # history limit 1 does not touch a run being dead-lettered
    assert final.releases == []  # released once the label is written and seen
    assert final.status["deadLetters"] == [
        {
            "run": RUN,
            "job": attempt_job_name(NAME, RUN, 3),
            "slot": "2026-01-05T09:00:00Z",
            "attempts": 3,
            "reason": "AttemptsExhausted",
            "failedAt": "2026-01-05T09:04:00Z",
        }
    ]


def test_a_dead_letter_stays_held_and_kept_until_its_retention_then_goes() -> None:
    raw = retrying(deadLetter={"retentionSeconds": 600}, failedJobsHistoryLimit=0)
    jobs = [
        attempt(1, JobState.FAILED, at(1), retried=True),
        attempt(2, JobState.FAILED, at(2), retried=True),
        attempt(3, JobState.FAILED, at(4), dead_letter=True),
    ]
    kept = decide(sj(raw), jobs, at(5))
    assert kept.labels == []
    # The earlier attempts are history like any failed Job (limit 0), and released; the dead
    # letter is kept and stays held, so that no TTL takes it before its retention.
    assert names(kept.deletions) == [jobs[0].name, jobs[1].name]
    assert sorted(names(kept.releases)) == sorted([jobs[0].name, jobs[1].name])
    assert kept.wake_at == at(14)  # its retention ends before the next slot
    assert len(kept.status["deadLetters"]) == 1

    expired = decide(sj(raw), [jobs[2]], at(14))
    assert [(d.job_name, d.reason) for d in expired.deletions] == [
        (jobs[2].name, DeletionReason.DEAD_LETTER_EXPIRED)
    ]
    assert names(expired.releases) == [jobs[2].name]


def test_a_failure_the_pod_failure_policy_calls_final_is_not_retried() -> None:
    failed = attempt(1, JobState.FAILED, at(1), failure_reason="PodFailurePolicy")
    decision = decide(sj(), [failed], at(3))
    assert decision.runs == []
    assert [(p.job_name, p.label) for p in decision.labels] == [(RUN, "cronlease.io/dead-letter")]
    assert decision.status["deadLetters"][0]["reason"] == "PodFailurePolicy"


def test_without_retry_a_failed_run_is_history_and_nothing_more() -> None:
    raw = spec(schedule=HOURLY)
    failed = attempt(1, JobState.FAILED, at(1))
    decision = decide(sj(raw), [failed], at(3))
    assert decision.runs == []
    assert decision.labels == []
    assert names(decision.releases) == [RUN]
    assert "deadLetters" not in decision.status


def test_forbid_waits_for_a_run_between_attempts() -> None:
    slow = {**RETRY, "backoff": {"initialSeconds": 7200}}
    raw = retrying(concurrencyPolicy="Forbid", retry=slow)
    failed = attempt(1, JobState.FAILED, at(1))
    decision = decide(sj(raw), [failed], at(60))  # the 10:00 slot is due; the retry is not
    assert decision.runs == []
    assert skip_counts(decision) == {"ConcurrencyForbid": 1}


def test_replace_ends_a_run_between_attempts() -> None:
    raw = retrying(
        concurrencyPolicy="Replace", retry={**RETRY, "backoff": {"initialSeconds": 7200}}
    )
    failed = attempt(1, JobState.FAILED, at(1))
    decision = decide(sj(raw), [failed], at(60))
    assert [(d.job_name, d.reason) for d in decision.deletions] == [(RUN, DeletionReason.REPLACE)]
    assert names(decision.runs) == [scheduled_job_name(NAME, at(60), with_seconds=False)]


def test_deleting_the_current_attempt_ends_the_run() -> None:
    running = attempt(2, JobState.ACTIVE, deleting=True)
    jobs = [attempt(1, JobState.FAILED, at(1)), running]
    decision = decide(sj(), jobs, at(10))
    assert decision.runs == []
    # The attempt before is marked retried first; only then is the run let go.
    assert [(p.job_name, p.label) for p in decision.labels] == [(RUN, "cronlease.io/retried")]
    assert decision.releases == []
    marked = [attempt(1, JobState.FAILED, at(1), retried=True), running]
    after = decide(sj(), marked, at(10))
    assert after.labels == []
    assert sorted(names(after.releases)) == sorted(j.name for j in marked)


def test_a_suspended_scheduledjob_starts_no_attempt() -> None:
    failed = attempt(1, JobState.FAILED, at(1))
    decision = decide(sj(retrying(suspend=True)), [failed], at(10))
    assert decision.runs == []
    assert decision.releases == []


def test_a_retry_of_a_run_now_keeps_its_token_and_trigger() -> None:
    token_run = "backup-mrun"
    failed = job(
        token_run,
        state=JobState.FAILED,
        slot=at(0, 30),
        trigger="Manual",
        run_now_token="t1",
        finished_at=at(1),
        held=True,
        max_attempts=3,
    )
    decision = decide(sj(runNowToken="t1"), [failed], at(2))
    (run,) = decision.runs
    assert (run.trigger, run.run_now_token, run.attempt, run.run) == ("Manual", "t1", 2, token_run)


def test_recent_runs_follow_the_attempts_and_a_late_success_is_announced_once() -> None:
    entry = {"slot": "2026-01-05T09:00:00Z", "job": RUN, "trigger": "Schedule",
             "result": "Active", "lagSeconds": 0.1, "run": RUN, "attempts": 1}  # fmt: skip
    start = sj(recentRuns=[entry])
    failed = attempt(1, JobState.FAILED, at(1))
    waiting = decide(start, [failed], at(1, 5))
    assert waiting.status["recentRuns"][0]["result"] == "Retrying"
    retry = decide(start, [failed], at(1, 10))
    (after,) = retry.status["recentRuns"]
    assert (after["job"], after["attempts"], after["result"]) == (
        attempt_job_name(NAME, RUN, 2),
        2,
        "Active",
    )
    retried, _ = after_apply(start, [failed], retry)
    second = attempt(2, JobState.SUCCEEDED, at(3))
    done = decide(retried, [failed, second], at(4))
    assert done.status["recentRuns"][0]["result"] == "Succeeded"
    assert "RunSucceeded" in event_reasons(done)
    again = decide(dataclasses.replace(retried, status=done.status), [failed, second], at(5))
    assert "RunSucceeded" not in event_reasons(again)


def test_attempt_jobs_are_trusted_only_under_their_own_names() -> None:
    raw = retrying()
    run = PlannedRun(attempt_job_name(NAME, RUN, 2), SLOT, "Schedule", None, 2, run=RUN)
    built = build_job(view(raw), run, "replica-a", 3)
    built["metadata"].update(uid="u2", creationTimestamp="2026-01-05T09:01:10Z")
    info = job_info(built)
    assert (info.trusted, info.run, info.attempt) == (True, RUN, 2)
    forged = copy.deepcopy(built)
    forged["metadata"]["labels"]["cronlease.io/attempt"] = "3"  # not the name's attempt
    assert not job_info(forged).trusted
    bad = copy.deepcopy(built)
    bad["metadata"]["labels"]["cronlease.io/attempt"] = "two"
    assert not job_info(bad).trusted
    pod = built["spec"]["template"]["metadata"]["annotations"]
    assert (pod["cronlease.io/attempt"], pod["cronlease.io/run"]) == ("2", RUN)


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"maxAttempts": 0}, "spec.retry.maxAttempts"),
        ({"maxAttempts": 11}, "spec.retry.maxAttempts"),
        ({"maxAttempts": "3"}, "spec.retry.maxAttempts"),
        ({"maxAttempts": True}, "spec.retry.maxAttempts"),
        ({"backoff": {"factor": 0.5}}, "spec.retry.backoff.factor"),
        ({"backoff": {"initialSeconds": -1}}, "spec.retry.backoff.initialSeconds"),
        ({"backoff": {"maxSeconds": 86_401}}, "spec.retry.backoff.maxSeconds"),
        ({"backoff": "fast"}, "spec.retry.backoff"),
        ("often", "spec.retry"),
    ],
)
def test_a_bad_retry_names_its_field(retry: Any, field: str) -> None:
    with pytest.raises(SpecError, match=f"^{re.escape(field)}:"):
        parse_spec(NAME, spec(schedule=HOURLY, retry=retry))


def test_a_bad_retention_names_its_field() -> None:
    with pytest.raises(SpecError, match=r"^spec\.deadLetter\.retentionSeconds:"):
        parse_spec(NAME, spec(schedule=HOURLY, deadLetter={"retentionSeconds": -1}))


# --- the shell: attempts and dead letters on the fake API server ------------------------------


def failed_status(at_: datetime, reason: str = "BackoffLimitExceeded") -> dict[str, Any]:
    condition = {"type": "Failed", "status": "True", "reason": reason}
    return {"status": {"conditions": [{**condition, "lastTransitionTime": format_time(at_)}]}}


async def test_the_shell_retries_a_failed_run_then_dead_letters_it_and_keeps_it() -> None:
    shell = Shell()
    shell.create("nightly", retry={"maxAttempts": 2, "backoff": {"initialSeconds": 5}})
    await shell.apply("nightly")
    (first,) = shell.jobs()
    name = first["metadata"]["name"]
    assert FINALIZER_SLOT_RECORD in first["metadata"]["finalizers"]
    shell.server.edit(*JOBS, NAMESPACE, name, failed_status(shell.now))
    shell.model.upsert_job(shell.server.get(*JOBS, NAMESPACE, name))
    await shell.apply("nightly")
    assert len(shell.jobs()) == 1  # its delay has not passed
    shell.now += timedelta(seconds=5)
    await shell.apply("nightly")
    retry = next(j for j in shell.jobs() if j["metadata"]["name"] != name)
    assert retry["metadata"]["labels"][LABEL_RUN] == name
    assert retry["metadata"]["labels"][LABEL_ATTEMPT] == "2"
    # The run goes on: both its attempts stay held, so neither can vanish and be tried again.
    assert all(FINALIZER_SLOT_RECORD in j["metadata"]["finalizers"] for j in shell.jobs())

    second = retry["metadata"]["name"]
    shell.server.edit(*JOBS, NAMESPACE, second, failed_status(shell.now))
    shell.model.upsert_job(shell.server.get(*JOBS, NAMESPACE, second))
    await shell.apply("nightly")
    letter = shell.server.get(*JOBS, NAMESPACE, second)
    assert letter is not None
    assert letter["metadata"]["labels"][LABEL_DEAD_LETTER] == "true"
    assert shell.status("nightly")["deadLetters"][0]["job"] == second
    await shell.apply("nightly")  # the label seen: the run is over, its Jobs are released,
    held = {j["metadata"]["name"] for j in shell.jobs() if j["metadata"].get("finalizers")}
    assert held == {second}  # but the dead letter, held until its retention passes
    assert len(shell.created_jobs()) == 2


async def test_an_attempt_deleted_while_it_runs_ends_its_run_and_is_never_made_again() -> None:
    """Deleting the current attempt ends the run. Without the hold, the attempt would vanish,
    the failed one before it would be the latest again, and its retry would be made twice."""
    shell = Shell()
    shell.create("nightly", retry={"maxAttempts": 3, "backoff": {"initialSeconds": 0}})
    await shell.apply("nightly")
    (first,) = shell.jobs()
    name = first["metadata"]["name"]
    shell.server.edit(*JOBS, NAMESPACE, name, failed_status(shell.now))
    shell.model.upsert_job(shell.server.get(*JOBS, NAMESPACE, name))
    await shell.apply("nightly")
    second = next(j["metadata"]["name"] for j in shell.jobs() if j["metadata"]["name"] != name)
    shell.server.remove(*JOBS, NAMESPACE, second)  # a user's kubectl delete
    deleted = shell.server.get(*JOBS, NAMESPACE, second)
    if deleted is not None:
        shell.model.upsert_job(deleted)
    else:
        shell.model.delete_job({"metadata": {"name": second, "namespace": NAMESPACE}})
    for _ in range(3):
        await shell.apply("nightly")
        for stored in shell.jobs():
            shell.model.upsert_job(stored)
    created = shell.created_jobs()
    assert len(created) == len(set(created)) == 2, created
    assert shell.server.get(*JOBS, NAMESPACE, second) is None  # released, then gone


def test_a_one_off_with_retries_is_complete_only_when_its_run_has_ended() -> None:
    raw = run_at_spec(SLOT, retry=RETRY)
    one_off = view(raw, status=processed(raw, SLOT))

    def completed(jobs: list[JobInfo], now: datetime) -> tuple[str, str]:
        found = condition(decide(one_off, jobs, now).status, "Completed")
        return found["status"], found["reason"]

    failed = attempt(1, JobState.FAILED, at(1))
    assert completed([failed], at(1, 5)) == ("False", "Pending")  # another attempt comes
    second = attempt(2, JobState.SUCCEEDED, at(3))
    assert completed([failed, second], at(4)) == ("True", "RunSucceeded")
    letter = attempt(3, JobState.FAILED, at(5), dead_letter=True)
    marked = [attempt(n, JobState.FAILED, at(n), retried=True) for n in (1, 2)]
    assert completed([*marked, letter], at(6)) == ("True", "RunDeadLettered")


def test_replace_ends_a_run_whose_retry_is_due_with_the_next_slot() -> None:
    """Both due in one decision (a failure just before a slot, or after an outage): the new
    slot's run replaces the old run; its next attempt is not made, so nothing overlaps."""
    raw = retrying(concurrencyPolicy="Replace")
    failed = attempt(1, JobState.FAILED, at(59, 50))
    decision = decide(sj(raw), [failed], at(60))
    assert names(decision.runs) == [scheduled_job_name(NAME, at(60), with_seconds=False)]
    assert [(d.job_name, d.reason) for d in decision.deletions] == [(RUN, DeletionReason.REPLACE)]
    assert "RunRetrying" not in event_reasons(decision)


def test_turning_retries_on_never_retries_or_dead_letters_runs_from_before() -> None:
    old = attempt(1, JobState.FAILED, at(1), max_attempts=0)  # made without spec.retry
    decision = decide(sj(), [old], at(10))
    assert decision.runs == []
    assert decision.labels == []
    assert names(decision.releases) == [RUN]


def test_lowering_max_attempts_stops_runs_in_flight_and_raising_it_does_not_extend_them() -> None:
    failed = attempt(2, JobState.FAILED, at(2))  # began under maxAttempts 3
    lower = retrying(retry={**RETRY, "maxAttempts": 2})
    assert [p.label for p in decide(sj(lower), [failed], at(10)).labels] == [
        "cronlease.io/dead-letter"
    ]
    last = attempt(3, JobState.FAILED, at(3))
    higher = retrying(retry={**RETRY, "maxAttempts": 5})
    assert decide(sj(higher), [last], at(10)).runs == []


def test_retried_attempts_are_marked_even_after_retries_were_turned_off() -> None:
    """A run in flight when spec.retry is removed: its retried attempt is still marked, and its
    Jobs held until then, so that turning retries on again can never make an attempt twice."""
    jobs = [attempt(1, JobState.FAILED, at(1)), attempt(2, JobState.SUCCEEDED, at(3))]
    decision = decide(sj(spec(schedule=HOURLY)), jobs, at(10))
    assert [(p.job_name, p.label) for p in decision.labels] == [(RUN, "cronlease.io/retried")]
    assert decision.releases == []


def test_a_template_cannot_carry_cronlease_labels_or_annotations() -> None:
    raw = retrying()
    raw["jobTemplate"]["metadata"] = {
        "labels": {"cronlease.io/retried": "true", "cronlease.io/dead-letter": "true", "a": "b"},
        "annotations": {"cronlease.io/max-attempts": "10", "c": "d"},
    }
    run = PlannedRun(RUN, SLOT, "Schedule", max_attempts=3)
    built = build_job(view(raw), run, "replica-a", 3)
    labels, annotations = built["metadata"]["labels"], built["metadata"]["annotations"]
    assert "cronlease.io/retried" not in labels
    assert "cronlease.io/dead-letter" not in labels
    assert labels["a"] == "b"
    assert (annotations["cronlease.io/max-attempts"], annotations["c"]) == ("3", "d")


def test_a_run_that_fails_with_no_retries_is_a_run_failed_warning_once() -> None:
    raw = spec(schedule=HOURLY)
    start = view(raw, status=processed(raw, SLOT))
    created = decide(dataclasses.replace(start, status=processed(raw, at(-60))), [], at(0, 1))
    listed, _ = after_apply(start, [], created)
    failed = job(RUN, state=JobState.FAILED, slot=SLOT, created_at=SLOT, finished_at=at(1),
                 failure_reason="BackoffLimitExceeded")  # fmt: skip
    first = decide(listed, [failed], at(2))
    assert [(e.type.value, e.reason, e.message) for e in first.events] == [
        ("Warning", "RunFailed", f"run {RUN} failed (BackoffLimitExceeded)")
    ]
    again = decide(dataclasses.replace(listed, status=first.status), [failed], at(3))
    assert "RunFailed" not in event_reasons(again)
