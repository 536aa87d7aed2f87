"""The buffering overlap policies, named as Temporal names them: BufferOne, BufferAll, CancelOther.

Under them a slot due while a run is active does not start and is not skipped at once: it waits
in `status.buffered` (instants, oldest first), written in the same status write as the cursor
that passed it, so a slot is always in exactly one place: before the cursor and buffered, run
(its Job exists) or recorded as skipped. Pure: `plan_queue` says what to do with the queue.

- BufferOne: at most one slot waits; one more due meanwhile is skipped (BufferFull).
- BufferAll: up to spec.bufferLimit slots wait, started one at a time, oldest first, each as the
  run before it ends; beyond the limit, the newest are skipped (BufferFull).
- CancelOther: the active run is deleted (foreground: its pods go first) and the newest due slot
  starts once the deleted Jobs are gone, so two runs never overlap; an older slot still waiting
  is superseded by a newer one. (Replace, kept as it was, deletes in the background and starts
  at once: Temporal's TerminateOther.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from cronlease.core.specs.spec import ConcurrencyPolicy


@dataclass
class QueuePlan:
    start: datetime | None = None  # the slot to start now
    waiting: list[datetime] = field(default_factory=list)  # status.buffered afterwards
    full: list[datetime] = field(default_factory=list)  # to record as skipped: BufferFull
    superseded: list[datetime] = field(default_factory=list)  # ... Superseded (CancelOther)
    cancel: bool = False  # CancelOther: delete the active runs


def plan_queue(
    policy: ConcurrencyPolicy, limit: int, queue: list[datetime], busy: bool, clearing: bool
) -> QueuePlan:
    """`queue`: the slots waiting and those just due, ascending, none run or recorded yet;
    `busy`: a run is active (or waits for its next attempt, or starts in this decision);
    `clearing`: a run CancelOther deleted is still there."""
    plan = QueuePlan()
    if not queue:
        return plan
    if policy is ConcurrencyPolicy.CANCEL_OTHER:
        *plan.superseded, newest = queue
        if busy or clearing:
            plan.waiting, plan.cancel = [newest], busy
        else:
            plan.start = newest
        return plan
    if not busy:
        plan.start, *queue = queue
    kept = 1 if policy is ConcurrencyPolicy.BUFFER_ONE else limit
    plan.waiting, plan.full = queue[:kept], queue[kept:]
    return plan
