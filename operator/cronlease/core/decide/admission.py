"""Whether one planned run (a slot's, a run-now's) starts: a run whose Job exists already ran and
is recorded, and the concurrency policy admits the rest, on the live model of Jobs.
"""

from __future__ import annotations

from datetime import datetime

from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.cursor import skip
from cronlease.core.decide.decision import (
    DeletionReason,
    EventRecord,
    EventType,
    PlannedDeletion,
    PlannedRun,
    SkipReason,
)
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import TRIGGER_MANUAL
from cronlease.core.specs.spec import BUFFERING, ConcurrencyPolicy


def record_if_exists(ctx: SlotContext, run: PlannedRun) -> bool:
    """Whether the run's Job exists (it ran: its record was lost); if so, it is recorded."""
    existing = next((job for job in ctx.owned if job.name == run.job_name), None)
    if existing is not None:
        ctx.decision.recorded.append((run, existing))
    return existing is not None


def admit(ctx: SlotContext, slot: datetime, trigger: str) -> bool:
    """Apply the concurrency policy to one run, on the live model of Jobs (not on status). A run
    waiting for its next attempt counts as active: Forbid waits for it, Replace ends it."""
    spec, owned, decision = ctx.spec, ctx.owned, ctx.decision
    doomed = {deletion.uid for deletion in decision.deletions}
    active = ctx.live(JobState.ACTIVE) + [job for job in ctx.waiting if job.uid not in doomed]
    if spec.concurrency_policy is ConcurrencyPolicy.CANCEL_OTHER:
        # A run deleted (now or by this decision) runs until it is gone.
        cancelling = {d.uid for d in decision.deletions if d.reason is DeletionReason.CANCEL_OTHER}
        active += ctx.clearing() + [job for job in owned if job.uid in cancelling]
    # A run planned in this decision is active too (catchUp All under Forbid starts one slot).
    if not active and not (
        decision.runs and spec.concurrency_policy is not ConcurrencyPolicy.ALLOW
    ):
        return True
    # Under a buffering policy a run-now does not wait in the queue: refused as under Forbid.
    if spec.concurrency_policy is ConcurrencyPolicy.FORBID or spec.concurrency_policy in BUFFERING:
        if trigger == TRIGGER_MANUAL:  # a refused request, not a slot: an Event, no counter
            decision.events.append(
                EventRecord(
                    EventType.WARNING,
                    "RunNowForbidden",
                    f"run-now refused: a run is active ({spec.concurrency_policy})",
                )
            )
        else:
            skip(decision, SkipReason.CONCURRENCY_FORBID, 1, slot)
        return False
    if spec.concurrency_policy is ConcurrencyPolicy.REPLACE:
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.REPLACE, job.kind) for job in active
        ]
    return True
