"""The status decide() writes: the cursor, the active runs, the last times, the counters, the
history (cronlease.core.decide.history) and the conditions; and an invalid spec's, reported once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.decision import Decision, EventRecord, EventType, ScheduledJobView
from cronlease.core.decide.history import RESULTS, UNFINISHED, dead_letters, recent_runs
from cronlease.core.decide.pausing import PAUSED
from cronlease.core.decide.releases import plan_releases
from cronlease.core.decide.requestplan import settled_request_runs
from cronlease.core.decide.runrequest import RunRequestView
from cronlease.core.decide.runs import ONGOING, RunOutcome, runs_of
from cronlease.core.names.conditions import (
    Summary,
    find_condition,
    remove_condition,
    set_condition,
    summarize,
)
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    GROUP,
    RUN_KIND,
    TRIGGER_SCHEDULE,
    VERSION,
    format_time,
    parse_time,
)
from cronlease.core.specs.policies import MAX_ATTEMPTS, RetryPolicy
from cronlease.core.specs.spec import Spec

# status.active lists at most this many Jobs (oldest first); activeCount counts them all. Allow
# with long runs can keep thousands active, and status must stay a small object.
ACTIVE_REFS = 100
# status.observedSchedule of an invalid spec.
INVALID = "<invalid>"
_JOB_KIND = {"apiVersion": "batch/v1", "kind": "Job"}


def write_status(ctx: SlotContext, cursor: datetime | None, paused: bool) -> None:
    """Write what this decision leaves in ctx.status, from the cursor to the conditions."""
    sj, spec, owned, status, decision = ctx.sj, ctx.spec, ctx.owned, ctx.status, ctx.decision
    active = sorted(
        [job.name for job in ctx.live(JobState.ACTIVE)] + [run.job_name for run in decision.runs]
    )
    # Refs carry no uid: a planned run has none yet, and adding it later would cost a write.
    kind = {"apiVersion": f"{GROUP}/{VERSION}", "kind": RUN_KIND} if spec.steps else _JOB_KIND
    status["active"] = [
        {**kind, "name": name, "namespace": sj.namespace} for name in active[:ACTIVE_REFS]
    ]
    status["activeCount"] = len(active)
    if cursor is not None:
        status["processedUntil"] = format_time(cursor)
    recorded = [run for run, _ in decision.recorded]
    scheduled = [run.slot for run in [*decision.runs, *recorded] if run.trigger == TRIGGER_SCHEDULE]
    last_schedule = max([*scheduled, *_times(status.get("lastScheduleTime"))], default=None)
    if last_schedule is not None:
        status["lastScheduleTime"] = format_time(last_schedule)
    succeeded = [
        job.finished_at for job in owned if job.state is JobState.SUCCEEDED and job.finished_at
    ]
    last_success = max([*succeeded, *_times(status.get("lastSuccessfulTime"))], default=None)
    if last_success is not None:
        status["lastSuccessfulTime"] = format_time(last_success)
    upcoming = None if spec.suspend or paused else next_slot(spec, cursor, ctx.now)
    status["nextScheduleTime"] = format_time(upcoming) if upcoming else None
    # Runs of slots and run-nows: a request counts its own runs (its cursor is in its status;
    # counted here too, a run whose request's write was lost would be counted again).
    first_attempts = [
        run for run in [*decision.runs, *recorded] if run.attempt == 1 and run.request is None
    ]
    status["runsCreated"] = int(status.get("runsCreated", 0)) + len(first_attempts)
    skipped = dict(status.get("slotsSkipped") or {})
    for skip in decision.skips:
        skipped[skip.reason.value] = int(skipped.get(skip.reason.value, 0)) + skip.count
    status["slotsSkipped"] = skipped
    status["recentRuns"] = recent_runs(ctx)
    letters = dead_letters(ctx)
    if letters:
        status["deadLetters"] = letters
    else:
        status.pop("deadLetters", None)
    status["observedGeneration"] = sj.generation
    status["conditions"] = _conditions(ctx, cursor)


def _times(text: str | None) -> list[datetime]:
    parsed = parse_time(text)
    return [parsed] if parsed else []


def _conditions(ctx: SlotContext, cursor: datetime | None) -> list[dict[str, Any]]:
    spec, now = ctx.spec, ctx.now
    conditions = list(ctx.status.get("conditions") or [])
    generation = ctx.sj.generation
    set_condition(conditions, "InvalidSpec", "False", "SpecValid", "", generation, now)
    if spec.suspend:
        set_condition(
            conditions,
            "Suspended",
            "True",
            "Suspended",
            "slots are skipped and recorded",
            generation,
            now,
        )
    else:
        set_condition(conditions, "Suspended", "False", "NotSuspended", "", generation, now)
    ready_reason, ready_message = "Scheduling", "slots are being scheduled"
    if spec.run_at is not None:
        completed = _one_off_outcome(ctx, cursor)
        if completed is None:
            set_condition(
                conditions,
                "Completed",
                "False",
                "Pending",
                "the run has not finished",
                generation,
                now,
            )
        else:
            set_condition(
                conditions,
                "Completed",
                "True",
                completed,
                "the one-off run is over",
                generation,
                now,
            )
            ready_reason, ready_message = (
                "Completed",
                "the one-off run is over; nothing more will run",
            )
    else:
        remove_condition(conditions, "Completed")
    summary = Summary.READY
    if spec.suspend and ready_reason != "Completed":
        ready_reason, ready_message = "Suspended", "spec.suspend is true: slots are skipped"
    pause = find_condition(conditions, PAUSED)
    if pause is not None and pause.get("status") == "True":
        # Paused after failed runs: it stays so until someone resumes it (kstatus: Failed).
        summary, ready_reason, ready_message = Summary.STALLED, PAUSED, str(pause["message"])
    summarize(conditions, summary, ready_reason, ready_message, generation, now)
    return conditions


def _one_off_outcome(ctx: SlotContext, cursor: datetime | None) -> str | None:
    """Why a one-off is over (RunSucceeded, RunFailed, RunDeadLettered, Skipped, ...), or None
    while it is not (its Job runs, or, with retries, another attempt may come)."""
    spec = ctx.spec
    assert spec.run_at is not None
    if cursor is None or cursor < spec.run_at:
        return None
    runs = runs_of(job for job in ctx.owned if job.slot == spec.run_at)
    outcomes = [run.outcome(spec.retry) for run in runs.values()]
    known = [outcome for outcome in outcomes if outcome is not RunOutcome.SUPERSEDED]
    if known:
        if any(outcome in ONGOING for outcome in known):
            return None
        return f"Run{RESULTS[known[-1]]}"
    recorded = [
        r for r in ctx.status.get("recentRuns") or [] if r.get("slot") == format_time(spec.run_at)
    ]
    if recorded and recorded[-1].get("result") in UNFINISHED:
        return None
    return f"Run{recorded[-1]['result']}" if recorded else "Skipped"


def next_slot(spec: Spec, cursor: datetime | None, now: datetime) -> datetime | None:
    """The next slot to process after `cursor`, if any (None: a one-off is processed)."""
    if spec.run_at is not None:
        processed = cursor is not None and cursor >= spec.run_at
        return None if processed else spec.run_at
    assert spec.schedule is not None
    if spec.jitter_seconds and cursor is not None and cursor < now:
        # Every slot up to now is processed but one that waits for its jitter: it comes next.
        return spec.schedule.next_after(cursor)
    return spec.schedule.next_after(max(now, cursor) if cursor else now)


def invalid(
    sj: ScheduledJobView,
    jobs: Sequence[JobInfo],
    requests: Sequence[RunRequestView],
    message: str,
    now: datetime,
) -> Decision:
    """An invalid spec is reported once (condition + Warning Event) and never retried in a loop.
    Jobs it created before are still released once recorded: that needs no valid spec."""
    status = dict(sj.status)
    conditions = list(status.get("conditions") or [])
    previous = find_condition(conditions, "InvalidSpec")
    set_condition(conditions, "InvalidSpec", "True", "InvalidSpec", message, sj.generation, now)
    # Stalled: nothing runs until the spec is edited (kstatus: Failed, not InProgress for ever).
    summarize(conditions, Summary.STALLED, "InvalidSpec", message, sj.generation, now)
    # Fixing the spec later is then an edit: it never runs slots from before the fix.
    status.update(conditions=conditions, observedGeneration=sj.generation, observedSchedule=INVALID)
    decision = Decision(status=status)
    if previous is None or previous.get("status") != "True" or previous.get("message") != message:
        decision.events.append(EventRecord(EventType.WARNING, "InvalidSpec", message))
    ongoing: frozenset[str] = frozenset()
    if "retry" in sj.spec or "deadLetter" in sj.spec:
        # The policy is unreadable: every run that any policy could still retry stays held.
        owned = [job for job in jobs if job.owner_uid == sj.uid and job.trusted]
        most = RetryPolicy(max_attempts=MAX_ATTEMPTS)
        ongoing = frozenset(name for name, run in runs_of(owned).items() if run.holds(most))
    plan_releases(sj, jobs, decision, settled_request_runs(requests, jobs), ongoing)
    return decision
