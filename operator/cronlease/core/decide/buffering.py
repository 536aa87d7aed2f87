"""The queue of a buffering policy, `status.buffered`: the slots waiting there and those just due
under BufferOne or BufferAll; one starts when nothing runs (cronlease.core.decide.overlap).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.cursor import skip
from cronlease.core.decide.decision import DeletionReason, PlannedDeletion, SkipReason
from cronlease.core.decide.overlap import plan_queue
from cronlease.core.decide.slots import late, planned_slot
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import TRIGGER_SCHEDULE, format_time, parse_time
from cronlease.core.specs.spec import BUFFERING


def run_queue(ctx: SlotContext, fresh: list[datetime], halted: SkipReason | None) -> None:
    """The slots waiting in status.buffered, and those just due under a buffering policy: start one
    when nothing runs, keep what the policy keeps, record the rest
    (cronlease.core.decide.overlap)."""
    sj, spec, status, decision = ctx.sj, ctx.spec, ctx.status, ctx.decision
    waiting_before = set(buffered(status))
    # An edit of the schedule started afresh (cronlease says so in ScheduleChanged): slots that
    # waited under the old one do not run.
    edited = sj.status.get("observedSchedule") not in (None, spec.trigger_key)
    kept: list[datetime] = []
    dropped: dict[SkipReason, list[datetime]] = {}
    for slot in sorted(waiting_before | set(fresh)):
        run = planned_slot(ctx, slot)
        # Found by its slot, not by its name: an edit may have changed how Jobs are named.
        existing = next(
            (
                job
                for job in ctx.owned
                if job.slot == slot and job.trigger == TRIGGER_SCHEDULE and job.attempt == 1
            ),
            None,
        )
        if existing is not None:  # it ran: its status write was lost
            decision.recorded.append((dataclasses.replace(run, job_name=existing.name), existing))
            continue
        if run.job_name in ctx.taken:
            reason: SkipReason | None = SkipReason.NAME_CONFLICT
        elif edited and slot in waiting_before:
            reason = SkipReason.SUPERSEDED
        elif halted is not None:
            reason = halted
        elif spec.concurrency_policy not in BUFFERING:
            reason = SkipReason.SUPERSEDED  # the policy was changed: nothing waits any more
        elif late(ctx, slot):
            reason = SkipReason.DEADLINE_EXCEEDED
        else:
            reason = None
        if reason is None:
            kept.append(slot)
        else:
            dropped.setdefault(reason, []).append(slot)
    doomed = {deletion.uid for deletion in decision.deletions}
    active = ctx.live(JobState.ACTIVE)
    active += [job for job in ctx.waiting if job.uid not in doomed]
    busy = bool(active or decision.runs)
    plan = plan_queue(spec.concurrency_policy, spec.buffer_limit, kept, busy, bool(ctx.clearing()))
    if plan.start is not None:
        # Waiting was the policy's doing: the lag counts from when the run could start.
        decision.runs.append(dataclasses.replace(planned_slot(ctx, plan.start), start=ctx.now))
    dropped.setdefault(SkipReason.BUFFER_FULL, []).extend(plan.full)
    dropped.setdefault(SkipReason.SUPERSEDED, []).extend(plan.superseded)
    for reason, slots in dropped.items():
        if slots:
            skip(decision, reason, len(slots), max(slots))
    if plan.cancel:
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.CANCEL_OTHER, job.kind)
            for job in active
        ]
    if plan.waiting:
        status["buffered"] = [format_time(slot) for slot in plan.waiting]
    else:
        status.pop("buffered", None)


def buffered(status: dict[str, Any]) -> list[datetime]:
    """status.buffered as instants; only the operator writes it (the fence keeps the rest out),
    but an entry it cannot read is dropped rather than trusted."""
    entries = status.get("buffered")
    if not isinstance(entries, list):
        return []
    return [slot for entry in entries if (slot := parse_time(entry)) is not None]
