"""A schedule's due slots and what becomes of each: run, skipped (late, superseded, halted, a name
conflict), recorded (its Job exists), or queued for a buffering policy
(cronlease.core.decide.buffering); catch-up after an outage, and each slot's jittered start.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from cronlease.core.decide.admission import admit, record_if_exists
from cronlease.core.decide.context import SlotContext
from cronlease.core.decide.cursor import skip
from cronlease.core.decide.decision import PlannedRun, SkipReason
from cronlease.core.decide.pausing import PAUSED
from cronlease.core.names.conditions import is_true
from cronlease.core.names.naming import TRIGGER_SCHEDULE, scheduled_job_name
from cronlease.core.schedule.jitter import jitter
from cronlease.core.specs.spec import BUFFERING, ConcurrencyPolicy

REPLACING = frozenset({ConcurrencyPolicy.REPLACE, ConcurrencyPolicy.CANCEL_OTHER})
# How late the scheduler may handle a slot and still call it on time. It covers the loop's wake-up
# and a burst of creations, so that startingDeadlineSeconds: 0 means "only if on time" and on-time
# slots really run (CronJob always wakes ~100 ms late, so its deadline 0 never runs anything).
ON_TIME_TOLERANCE = timedelta(seconds=1)
# Due slots enumerated one by one; older ones (after a long outage) are only counted.
MAX_ENUMERATED_SLOTS = 1000
# Missed slots one decision may still run (within their deadline); older ones are superseded.
MAX_CATCH_UP_RUNS = 100


def due_slots(ctx: SlotContext, cursor: datetime | None) -> tuple[list[datetime], int]:
    """Due slots, oldest first, and how many older ones were only counted, not listed. Under
    jitter, the newest slot is not due until its start (earlier ones have started: a start is
    before the next slot)."""
    spec, now = ctx.spec, ctx.now
    if spec.run_at is not None:
        processed = cursor is not None and cursor >= spec.run_at
        return ([spec.run_at] if not processed and spec.run_at <= now else []), 0
    assert spec.schedule is not None
    assert cursor is not None
    due = spec.schedule.slots_between(cursor, now, limit=MAX_ENUMERATED_SLOTS)
    uncounted = 0
    if len(due) == MAX_ENUMERATED_SLOTS:
        uncounted = spec.schedule.count_between(cursor, now) - len(due)
    if due and start(ctx, due[-1]) > now:
        due.pop()  # the cursor stays before it; the decision wakes at its start
    return due, uncounted


def start(ctx: SlotContext, slot: datetime) -> datetime:
    """When a slot's run is due: the slot, plus its jitter (cronlease.core.schedule.jitter) if
    any."""
    sj, spec = ctx.sj, ctx.spec
    if not spec.jitter_seconds or spec.schedule is None:
        return slot
    following = spec.schedule.next_after(slot)
    gap = following - slot if following is not None else None
    return slot + jitter(sj.namespace, sj.name, slot, spec.jitter_seconds, gap)


def late(ctx: SlotContext, slot: datetime) -> bool:
    """Whether a slot's run is past spec.startingDeadlineSeconds (counted from its start, so a
    jitter never makes a run late)."""
    due = start(ctx, slot)
    deadline = ctx.spec.starting_deadline_seconds
    return deadline is not None and ctx.now - due > timedelta(seconds=deadline) + ON_TIME_TOLERANCE


def halt_reason(ctx: SlotContext, paused: bool) -> SkipReason | None:
    """Why due slots are skipped rather than run, if they are: a suspension or a pause, now or
    until this decision (lifting either never runs the slots that came due meanwhile)."""
    sj = ctx.sj
    if ctx.spec.suspend or is_true(sj.status.get("conditions"), "Suspended"):
        return SkipReason.SUSPENDED
    if paused or is_true(sj.status.get("conditions"), PAUSED):
        return SkipReason.PAUSED
    return None


def planned_slot(ctx: SlotContext, slot: datetime) -> PlannedRun:
    """A slot's run, as first planned: its first attempt, named for the slot."""
    spec = ctx.spec
    # A runAt instant has seconds precision: naming it by minute could collide after an edit.
    with_seconds = spec.schedule.has_seconds if spec.schedule else True
    name = scheduled_job_name(ctx.sj.name, slot, with_seconds)
    return PlannedRun(
        name, slot, TRIGGER_SCHEDULE, max_attempts=ctx.max_attempts, start=start(ctx, slot)
    )


def handle_due_slots(
    ctx: SlotContext, due: list[datetime], uncounted: int, halted: SkipReason | None
) -> list[datetime]:
    """Run, skip or record each due slot; the slots that go to the queue of a buffering policy
    (cronlease.core.decide.overlap) instead are returned."""
    spec, decision = ctx.spec, ctx.decision
    # A slot that already has a Job ran, whatever the policy says now (its record was lost with
    # a crash or a lost response): it is recorded as a run and never counted as skipped.
    pending = [slot for slot in due if not record_if_exists(ctx, planned_slot(ctx, slot))]
    conflicts = [slot for slot in pending if planned_slot(ctx, slot).job_name in ctx.taken]
    if conflicts:
        skip(decision, SkipReason.NAME_CONFLICT, len(conflicts), conflicts[-1])
        pending = [slot for slot in pending if slot not in conflicts]
    # Slots only counted, never listed, are older than due[0]: late if it is, else superseded.
    uncounted_late = uncounted if late(ctx, due[0]) else 0
    if halted is not None:
        # Suspended or paused, or until this decision (it was resumed since): slots of the halt
        # are recorded once, when a decision happens, not with a wake-up and a write each.
        if pending or uncounted:
            skip(decision, halted, len(pending) + uncounted, (pending or due)[-1])
        return []
    too_late = [slot for slot in pending if late(ctx, slot)]
    timely = pending[len(too_late) :]  # ascending, so the late ones are a prefix
    # catchUp All (or, unset, Allow with a deadline): a slot still within its deadline is still
    # worth running, so after a failover or an outage every one of them runs, where CronJob runs
    # only the newest (catchUp Latest). Under Replace or CancelOther each would end the one before.
    every = spec.catches_up_all and spec.concurrency_policy not in REPLACING
    runnable = timely[-MAX_CATCH_UP_RUNS:] if every else timely[-1:]
    superseded = timely[: len(timely) - len(runnable)]
    if too_late or uncounted_late:
        skip(
            decision,
            SkipReason.DEADLINE_EXCEEDED,
            len(too_late) + uncounted_late,
            (too_late or due)[-1 if too_late else 0],
        )
    if superseded or uncounted - uncounted_late:
        count = len(superseded) + uncounted - uncounted_late
        skip(decision, SkipReason.SUPERSEDED, count, superseded[-1] if superseded else due[0])
    if spec.concurrency_policy in BUFFERING:
        return runnable
    for slot in runnable:
        if admit(ctx, slot, TRIGGER_SCHEDULE):
            decision.runs.append(planned_slot(ctx, slot))
    return []
