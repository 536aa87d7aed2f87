"""Retries and dead letters (spec.retry): the next attempt of each failed run once its delay has
passed, and a dead letter for each run with no attempt left (cronlease.core.decide.runs says what
each run has come to).
"""

from __future__ import annotations

from datetime import timedelta

from cronlease.core.decide.context import SlotContext, earliest
from cronlease.core.decide.decision import (
    EventRecord,
    EventType,
    PlannedLabel,
    PlannedRun,
    RequestTarget,
)
from cronlease.core.decide.runs import RunOutcome
from cronlease.core.names.jobinfo import NOT_RETRYABLE, JobInfo
from cronlease.core.names.naming import LABEL_DEAD_LETTER, LABEL_RETRIED, attempt_job_name


def plan_attempts(ctx: SlotContext) -> None:
    """The next attempt of each failed run whose delay has passed; a dead letter for each run
    with no attempt left. A suspended ScheduledJob starts no attempt (its runs wait)."""
    sj, spec, runs, now, decision = ctx.sj, ctx.spec, ctx.runs, ctx.now, ctx.decision
    doomed = {deletion.uid for deletion in decision.deletions}
    for run in runs.values():
        decision.labels += [
            PlannedLabel(job.name, job.uid, LABEL_RETRIED, kind=job.kind) for job in run.unmarked
        ]
    retry = spec.retry
    if retry is None:
        return
    for name, outcome in sorted(ctx.outcomes.items()):
        latest = runs[name].latest
        if latest.uid in doomed:  # ended by Replace in this decision
            continue
        if outcome is RunOutcome.EXHAUSTED:
            decision.labels.append(
                PlannedLabel(latest.name, latest.uid, LABEL_DEAD_LETTER, kind=latest.kind)
            )
            why = dead_letter_reason(latest)
            decision.events.append(
                EventRecord(
                    EventType.WARNING,
                    "DeadLettered",
                    f"run {name} failed after {latest.attempt} attempt(s) ({why}); "
                    f"Job {latest.name} is kept as a dead letter",
                )
            )
            continue
        if outcome is not RunOutcome.RETRYING or spec.suspend or latest.slot is None:
            continue
        due = (latest.finished_at or now) + timedelta(seconds=retry.delay(latest.attempt))
        if due > now:
            decision.wake_at = earliest(decision.wake_at, due)
            continue
        attempt = latest.attempt + 1
        job_name = attempt_job_name(sj.name, name, attempt)
        if job_name in ctx.taken:
            # Someone else's Job holds the name (the next attempt, orphaned by a user): the run
            # cannot go on, and this attempt is done with, as if retried.
            decision.labels.append(
                PlannedLabel(latest.name, latest.uid, LABEL_RETRIED, kind=latest.kind)
            )
            decision.events.append(
                EventRecord(
                    EventType.WARNING,
                    "RetryConflict",
                    f"run {name}: attempt {attempt} not started, Job {job_name} exists and was "
                    "not created by cronlease",
                )
            )
            continue
        decision.runs.append(
            PlannedRun(
                job_name,
                latest.slot,
                latest.trigger,
                latest.run_now_token,
                attempt,
                run=name,
                max_attempts=latest.max_attempts,
                request=_request_of(latest),
            )
        )
        decision.events.append(
            EventRecord(
                EventType.NORMAL,
                "RunRetrying",
                f"run {name}: attempt {attempt} of {retry.max_attempts} "
                f"(attempt {latest.attempt} failed)",
            )
        )


def _request_of(job: JobInfo) -> RequestTarget | None:
    if not job.request_uid:
        return None
    return RequestTarget(job.request_name, job.request_uid, job.request_index)


def dead_letter_reason(job: JobInfo) -> str:
    """Why a run is a dead letter: its failure was not retryable, or it ran out of attempts."""
    return NOT_RETRYABLE if job.failure_reason == NOT_RETRYABLE else "AttemptsExhausted"
