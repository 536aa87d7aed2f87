"""decide(): given a ScheduledJob, the Jobs it owns and the time, what to do now.

A pure function: it reads nothing but its arguments and returns a Decision that the shell applies
(create, delete, write status, post events). Everything the operator promises about slots lives
here, so it is tested table by table without a cluster.

The exactly-once cursor is `status.processedUntil`: every slot at or before it was either run or
recorded as skipped. Slots after it and not after `now` are due. A run's Job name is a function of
its slot, so if the shell crashes between creating a Job and writing the cursor, the next decision
plans the same name again and the API server's AlreadyExists stops a second Job.

decide() only orders the parts, which share one SlotContext (context.py): the cursor (cursor.py),
due slots and catch-up (slots.py, through admission.py), the buffering queue (buffering.py),
run-now (runnow.py), retries and dead letters (attempts.py), the requests (requestplan.py), history
(history.py), finalizer releases (releases.py) and the status (status.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cronlease.core.decide.attempts import plan_attempts
from cronlease.core.decide.buffering import run_queue
from cronlease.core.decide.context import SlotContext, earliest
from cronlease.core.decide.cursor import find_cursor
from cronlease.core.decide.decision import (
    Decision,
    ScheduledJobView,
)
from cronlease.core.decide.history import (
    ended_results,
    plan_history_cleanup,
)
from cronlease.core.decide.pausing import update_pause
from cronlease.core.decide.releases import plan_releases
from cronlease.core.decide.requestplan import RequestContext, plan_requests, settled_request_runs
from cronlease.core.decide.runnow import handle_run_now
from cronlease.core.decide.runrequest import RunRequestView
from cronlease.core.decide.slots import (
    due_slots,
    halt_reason,
    handle_due_slots,
    start,
)
from cronlease.core.decide.status import invalid, next_slot, write_status
from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import ANNOTATION_RESUME
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import parse_spec


def decide(
    sj: ScheduledJobView,
    jobs: Sequence[JobInfo],
    now: datetime,
    requests: Sequence[RunRequestView] = (),
) -> Decision:
    """Plan the actions for `sj` at `now`, given the Jobs the live model says it owns and the
    RunRequests that name it."""
    # Only a Job that carries what the leader writes is a run. Others under this owner reference
    # (made or edited by a user, forged by a tenant) are never counted, recorded or deleted; a
    # slot whose Job name one of them holds is skipped as a conflict.
    owned = [job for job in jobs if job.owner_uid == sj.uid and job.trusted]
    taken = frozenset(job.name for job in jobs if job.owner_uid != sj.uid or not job.trusted)
    try:
        spec = parse_spec(sj.name, sj.spec, sj.created_at)
    except SpecError as error:
        return invalid(sj, jobs, requests, str(error), now)
    refused = sj.status.get("templateError") or {}
    if refused.get("generation") == sj.generation:
        message = f"spec.jobTemplate: {refused.get('message', '')}"
        return invalid(sj, jobs, requests, message, now)
    ctx = SlotContext.of(sj, spec, owned, taken, now)
    decision, status, runs = ctx.decision, ctx.status, ctx.runs
    cursor = find_cursor(ctx)
    ended = ended_results(ctx)
    resume = sj.annotations.get(ANNOTATION_RESUME)
    paused, events = update_pause(spec.pause_on_failure, ended, resume, status, sj.generation, now)
    decision.events += events

    due, uncounted = due_slots(ctx, cursor)
    halted = halt_reason(ctx, paused)
    queued: list[datetime] = []
    if due:
        queued = handle_due_slots(ctx, due, uncounted, halted)
        cursor = due[-1]
    # Before run-now and next attempts: a slot CancelOther starts ends what runs, and a run-now
    # in the same decision then waits (as under Forbid) rather than being cancelled next time.
    run_queue(ctx, queued, halted)
    handle_run_now(ctx)
    # After the new runs: a run that Replace or CancelOther has just ended gets no next attempt.
    plan_attempts(ctx)
    # Last: a request's run starts only when no other run is planned, under Forbid.
    asked = RequestContext(
        sj.name,
        spec,
        owned,
        runs,
        ctx.outcomes,
        taken,
        busy=ctx.busy(),
        max_attempts=ctx.max_attempts,
        now=now,
    )
    plan_requests(asked, requests, decision)
    kept_held = plan_history_cleanup(ctx, asked.keep)
    ongoing = frozenset(name for name, run in runs.items() if run.holds(spec.retry))
    settled = settled_request_runs(requests, jobs)
    plan_releases(sj, jobs, decision, settled, ongoing, kept_held)
    write_status(ctx, cursor, paused)
    decision.status = status
    if not (spec.suspend or paused) and (following := next_slot(spec, cursor, now)) is not None:
        decision.wake_at = earliest(decision.wake_at, start(ctx, following))
    return decision
