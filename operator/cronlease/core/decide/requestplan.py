"""What the leader does for a ScheduledJob's RunRequests in one decision: pure, called by decide().

Exactly once per (request, target), as for slots: a target's run is named from the request's uid
and the target's index (cronlease.core.names.naming.request_job_name), so a repeated create meets
AlreadyExists; `status.started` is the cursor (targets below it have their run); and a request's
Jobs hold the slot-record finalizer until the request's status records their result, so none
can vanish (TTL, a user, history cleanup) before the request has counted it. A request that is
deleted is cancelled: no target is started after its deletion is seen, and its Jobs are
released; the runs it started go on, as runs of the ScheduledJob.

Across requests, a run is replayed once while it is being replayed (issue 33, finding 10): a
replay accepted while another running request still has the same run to replay, or is replaying
it, records that holder with the target (`heldBy`), and skips the target (SkippedAlreadyRequested,
`skippedIndexes`) once the holder has started it, or when it comes to the target and the holder
may still start it. A holder deleted or failed before starting it leaves it to the later request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronlease.core.decide.decision import (
    Decision,
    EventRecord,
    EventType,
    PlannedLabel,
    PlannedRun,
    RequestStatus,
    RequestTarget,
)
from cronlease.core.decide.runrequest import (
    MAX_STARTS_PER_DECISION,
    MAX_TARGETS,
    Holder,
    ReplayTarget,
    RequestAction,
    RequestError,
    RequestPhase,
    RequestPolicy,
    RequestSpec,
    RunRequestView,
    count,
    format_indexes,
    parse_indexes,
    parse_request_spec,
    replay_targets,
    summarize_request,
)
from cronlease.core.decide.runs import ONGOING, Run, RunOutcome
from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import (
    DEAD_LETTER_REPLAYED,
    LABEL_DEAD_LETTER,
    TRIGGER_BACKFILL,
    TRIGGER_REPLAY,
    format_time,
    request_job_name,
)
from cronlease.core.specs.spec import ConcurrencyPolicy, Spec

# A backfill's window includes its first instant: slots are listed after this much before it.
_JUST_BEFORE = timedelta(milliseconds=1)
_DEAD = frozenset({RunOutcome.DEAD_LETTERED, RunOutcome.EXHAUSTED})


@dataclass
class RequestContext:
    """What decide() knows that the requests need: the ScheduledJob's runs now, and whether one
    of them is active (a run planned by this decision included)."""

    name: str  # the ScheduledJob's
    spec: Spec
    owned: Sequence[JobInfo]
    runs: dict[str, Run]
    outcomes: dict[str, RunOutcome]
    taken: frozenset[str]
    busy: bool
    max_attempts: int
    now: datetime
    keep: set[str] = field(default_factory=set)  # uids of Jobs history cleanup must leave
    # The requests' statuses by uid, as this decision has them so far (a request not here is
    # gone: deleted), and which request holds each run being replayed (_holders).
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    holders: dict[str, Holder] = field(default_factory=dict)


def settled_request_runs(requests: Sequence[RunRequestView], jobs: Sequence[JobInfo]) -> set[str]:
    """The request runs among `jobs` whose Jobs need not be held for their request: the request
    is gone (cancelled), or its status, as persisted, records the run's result."""
    recorded = {
        request.uid: parse_indexes(request.status.get("succeededIndexes"))
        | parse_indexes(request.status.get("failedIndexes"))
        for request in requests
    }
    return {
        job.run_name
        for job in jobs
        if job.request_uid
        and (job.request_uid not in recorded or job.request_index in recorded[job.request_uid])
    }


def plan_requests(
    context: RequestContext, requests: Sequence[RunRequestView], decision: Decision
) -> None:
    """Advance every request for this ScheduledJob, oldest first: record its runs' results,
    start its next targets, write its status. Adds to `context.keep` the Jobs whose result a
    request has not yet recorded."""
    ordered = sorted(requests, key=lambda r: (r.created_at or context.now, r.name))
    context.statuses = {request.uid: request.status for request in ordered}
    context.holders = _holders(ordered)
    for request in ordered:
        status = dict(request.status)
        marks = (len(decision.runs), len(decision.recorded), len(decision.labels))
        events, busy = len(decision.events), context.busy
        try:
            _advance(context, request, status, decision)
        except Exception as error:
            # One bad request must never stop its ScheduledJob's decisions (its slots, its
            # other requests): whatever it raised, it fails alone, and nothing it planned stands.
            del decision.runs[marks[0] :], decision.recorded[marks[1] :]
            del decision.labels[marks[2] :], decision.events[events:]
            context.busy, status = busy, dict(request.status)
            _fail(request, status, f"cannot be carried out: {type(error).__name__}", decision)
        summarize_request(status, request.generation, context.now)
        context.statuses[request.uid] = status
        if status != request.status:
            decision.requests.append(
                RequestStatus(request.ref, request.version, request.status, status)
            )


def _advance(
    context: RequestContext, request: RunRequestView, status: dict[str, Any], decision: Decision
) -> None:
    by_index = {
        run.attempts[0].request_index: run
        for run in context.runs.values()
        if run.attempts[0].request_uid == request.uid
    }
    if status.get("phase") == RequestPhase.COMPLETE:
        _mark_replayed(context, request, status, by_index, decision)  # a relabel that was lost
        return
    spec: RequestSpec | None = None
    try:
        spec = parse_request_spec(request.spec)
    except RequestError as error:
        _fail(request, status, str(error), decision)
    if spec is not None and status.get("phase") in (None, RequestPhase.PENDING):
        # Accepted in a decision of its own, which starts no target: a target's Job exists only
        # once the acceptance (its total, its targets) is persisted, so no later decision, at
        # another "now", can judge the request afresh and disown a Job it already made.
        try:
            _accept(context, request, spec, status, decision)
        except RequestError as error:
            _fail(request, status, str(error), decision)
        return
    if status.get("phase") == RequestPhase.FAILED and not by_index:
        return  # nothing of it runs, nothing will
    # Results, whatever the phase: a request that failed still records the runs it made, so that
    # their Jobs are released.
    active = _record_results(context, request, status, by_index)
    if spec is None:
        return
    if status.get("phase") == RequestPhase.RUNNING:
        active += _start_targets(context, request, spec, status, decision)
    _mark_replayed(context, request, status, by_index, decision)
    total, started = count(status, "total"), count(status, "started")
    status["active"] = active
    if status.get("phase") == RequestPhase.RUNNING and started >= total and not active:
        failed, skipped = count(status, "failed"), count(status, "skipped")
        status.update(phase=RequestPhase.COMPLETE.value, completedAt=format_time(context.now))
        status["message"] = f"{total - failed - skipped} of {total} run(s) succeeded"
        if skipped:
            status["message"] += f", {skipped} skipped: replayed by another request"
        decision.events.append(
            EventRecord(
                EventType.WARNING if failed else EventType.NORMAL,
                "RequestComplete",
                f"{spec.action.value.lower()} complete: {status['message']}",
                request.ref,
            )
        )


def _accept(
    context: RequestContext,
    request: RunRequestView,
    spec: RequestSpec,
    status: dict[str, Any],
    decision: Decision,
) -> None:
    """Fix the request's targets once, at its first decision: a backfill's slots under the
    schedule of now; a replay's runs, with their slots, as the Jobs say now."""
    if spec.action is RequestAction.BACKFILL:
        total = len(_window(context, spec, check=True))
        status["observedSchedule"] = context.spec.trigger_key
        assert spec.start is not None
        assert spec.end is not None
        window = f"{format_time(spec.start)} to {format_time(spec.end)}"
        what = f"backfill of {total} slot(s) from {window}"
    else:
        targets = _claim(context, request, _resolve_replay(context, spec))
        status["targets"] = [target.to_status() for target in targets]
        total = len(targets)
        what = f"replay of {total} run(s)"
        holders = sorted({target.held_by.name for target in targets if target.held_by})
        if holders:
            held = sum(1 for target in targets if target.held_by)
            what += (
                f"; {held} of them being replayed by request {', '.join(holders)}, "
                "which this one leaves them to"
            )
    status.update(
        phase=RequestPhase.RUNNING.value,
        message=what,
        total=total,
        started=0,
        startedAt=format_time(context.now),
    )
    decision.events.append(EventRecord(EventType.NORMAL, "RequestAccepted", what, request.ref))


def _window(context: RequestContext, spec: RequestSpec, check: bool = False) -> list[datetime]:
    """The backfill's slots, oldest first; with `check`, RequestError if the window is in the
    future or holds more than MAX_TARGETS slots."""
    assert spec.start is not None
    assert spec.end is not None
    if check and spec.end > context.now:
        raise RequestError(
            f"spec.backfill.to: {format_time(spec.end)} is in the future; a backfill runs past "
            "slots (the schedule runs the others)"
        )
    schedule, run_at = context.spec.schedule, context.spec.run_at
    if schedule is None:
        assert run_at is not None
        return [run_at] if spec.start <= run_at <= spec.end else []
    try:
        after = spec.start - _JUST_BEFORE
        total = schedule.count_between(after, spec.end) if check else 0
        slots = schedule.slots_between(after, spec.end, limit=MAX_TARGETS)
    except (OverflowError, ValueError) as error:  # an instant near year 1 in a zone before UTC
        raise RequestError(f"spec.backfill: the window cannot be enumerated: {error}") from None
    if total > MAX_TARGETS:
        raise RequestError(
            f"spec.backfill: the window holds {total} slots of the schedule; at most "
            f"{MAX_TARGETS} per request"
        )
    return slots


def _resolve_replay(context: RequestContext, spec: RequestSpec) -> list[ReplayTarget]:
    if spec.dead_letters:
        letters = [run for name, run in context.runs.items() if context.outcomes[name] in _DEAD]
        letters.sort(key=lambda run: (run.latest.slot or context.now, run.name))
        return [_target(run) for run in letters[:MAX_TARGETS]]
    by_job = {job.name: run for run in context.runs.values() for job in run.attempts}
    targets: list[ReplayTarget] = []
    named: dict[str, int] = {}
    for index, name in enumerate(spec.runs):
        run = context.runs.get(name) or by_job.get(name)
        if run is None:
            raise RequestError(
                f"spec.replay.runs[{index}]: {context.name} has no run or Job named {name} "
                "(its Jobs may be gone: history limits, TTL)"
            )
        if run.name in named:  # by the run's name and one of its Jobs', or two of its Jobs
            raise RequestError(
                f"spec.replay.runs[{index}]: {name} is run {run.name}, which "
                f"spec.replay.runs[{named[run.name]}] names already: a run is replayed once"
            )
        named[run.name] = index
        targets.append(_target(run))
    return targets


def _holders(requests: Sequence[RunRequestView]) -> dict[str, Holder]:
    """Which request holds each run that running replays have still to replay or are
    replaying: the first in decision order, preferring a target that found no holder at its
    acceptance (one that did may yet run the run, if its own holder goes)."""
    holders: dict[str, Holder] = {}
    for held in (False, True):
        for request in requests:
            if request.status.get("phase") != RequestPhase.RUNNING:
                continue
            ended = _ended(request.status)
            for index, target in enumerate(replay_targets(request.status) or []):
                if index not in ended and (target.held_by is not None) == held:
                    holders.setdefault(target.run, Holder(request.name, request.uid, index))
    return holders


def _claim(
    context: RequestContext, request: RunRequestView, targets: list[ReplayTarget]
) -> list[ReplayTarget]:
    """The targets of a replay being accepted, each with the request that holds its run if
    another does; the runs no other holds are this request's from now on."""
    claimed = []
    for index, target in enumerate(targets):
        holder = context.holders.get(target.run)
        if holder is not None and holder.uid != request.uid:
            target = dataclasses.replace(target, held_by=holder)
        else:
            context.holders[target.run] = Holder(request.name, request.uid, index)
        claimed.append(target)
    return claimed


def _ended(status: dict[str, Any]) -> set[int]:
    """The targets whose run the request has recorded as ended, or skipped."""
    return (
        parse_indexes(status.get("succeededIndexes"))
        | parse_indexes(status.get("failedIndexes"))
        | parse_indexes(status.get("skippedIndexes"))
    )


def _target(run: Run) -> ReplayTarget:
    first = run.attempts[0]
    assert first.slot is not None, "a trusted Job has a slot"
    return ReplayTarget(run.name, first.slot, first.run_now_token)


def _record_results(
    context: RequestContext,
    request: RunRequestView,
    status: dict[str, Any],
    by_index: dict[int, Run],
) -> int:
    """Record in `status` the result of every started target whose run ended; the number still
    going on. The Jobs of runs whose result the persisted status lacks are kept from history."""
    persisted = parse_indexes(request.status.get("succeededIndexes")) | parse_indexes(
        request.status.get("failedIndexes")
    )
    succeeded = parse_indexes(status.get("succeededIndexes"))
    failed = parse_indexes(status.get("failedIndexes"))
    skipped = parse_indexes(status.get("skippedIndexes"))
    active = 0
    # The runs below the cursor, and any above it (made before a cursor write that was lost).
    for index in sorted(set(range(count(status, "started"))) | set(by_index)):
        run = by_index.get(index)
        if run is not None and index not in persisted:
            context.keep.update(job.uid for job in run.attempts)
        if index in succeeded or index in failed or (index in skipped and run is None):
            continue
        outcome = context.outcomes.get(run.name) if run is not None else None
        if outcome is RunOutcome.SUCCEEDED:
            succeeded.add(index)
        elif outcome in ONGOING:
            active += 1
        else:  # failed, dead-lettered, deleted; or its Jobs are gone (a user forced them)
            failed.add(index)
    _set_indexes(status, "succeeded", succeeded)
    _set_indexes(status, "failed", failed)
    _set_indexes(status, "skipped", skipped - succeeded - failed)
    return active


def _set_indexes(status: dict[str, Any], result: str, indexes: set[int]) -> None:
    status[result] = len(indexes)
    if indexes:
        status[f"{result}Indexes"] = format_indexes(indexes)
    else:
        status.pop(f"{result}Indexes", None)


def _start_targets(
    context: RequestContext,
    request: RunRequestView,
    spec: RequestSpec,
    status: dict[str, Any],
    decision: Decision,
) -> int:
    """Start the next targets the request's policy allows; how many were started. A suspended
    ScheduledJob starts none (its requests wait, as its slots do not)."""
    total, started = count(status, "total"), count(status, "started")
    if context.spec.suspend or started >= total:
        return 0
    if spec.action is RequestAction.BACKFILL:
        if status.get("observedSchedule") != context.spec.trigger_key:
            message = (
                f"the schedule changed while the backfill ran: {total - started} of {total} "
                "slot(s) were not run"
            )
            _fail(request, status, message, decision)
            return 0
        slots = _window(context, spec)
        targets = [ReplayTarget("", slot) for slot in slots]
    else:
        replays = replay_targets(status)
        if replays is None or len(replays) != total:
            _fail(request, status, "status.targets was edited; the request cannot go on", decision)
            return 0
        targets = replays
        _skip_started_elsewhere(context, request, targets, status, decision)
    skipped = parse_indexes(status.get("skippedIndexes"))
    if spec.policy is RequestPolicy.ALLOW and context.spec.concurrency_policy is (
        ConcurrencyPolicy.ALLOW
    ):
        budget = MAX_STARTS_PER_DECISION
    else:
        # Forbid; or Allow asked of a ScheduledJob whose owner chose Forbid or Replace: a
        # request may not overlap runs that its owner said must never overlap.
        budget = 0 if context.busy else 1
    trigger = TRIGGER_BACKFILL if spec.action is RequestAction.BACKFILL else TRIGGER_REPLAY
    begun = 0
    while started < min(total, len(targets)):
        target = targets[started]
        name = request_job_name(context.name, trigger, request.uid, started)
        run = PlannedRun(
            name,
            target.slot,
            trigger,
            target.run_now_token,
            max_attempts=context.max_attempts,
            request=RequestTarget(request.name, request.uid, started),
        )
        existing = next((job for job in context.owned if job.name == name), None)
        if existing is not None:
            # Created before the cursor was written (a crash, a lost response): recorded, and
            # whatever the policy says now, it ran.
            decision.recorded.append((run, existing))
            started, begun = started + 1, begun + 1
            continue
        if started in skipped:
            started += 1
            continue
        why = _replayed_elsewhere(context, spec, target, decision)
        if why is not None:  # decided when the cursor comes to it, whatever becomes of the holder
            _skip_target(request, status, started, target, why, decision)
            started += 1  # no run, no budget: a skip waits for nothing
            continue
        if not budget:
            break
        if name in context.taken:
            failed = parse_indexes(status.get("failedIndexes")) | {started}
            _set_indexes(status, "failed", failed)
            decision.events.append(
                EventRecord(
                    EventType.WARNING,
                    "RequestConflict",
                    f"target {started} not run: Job {name} exists and was not created by cronlease",
                    request.ref,
                )
            )
            started += 1
            budget -= 1
            continue
        decision.runs.append(run)
        started, budget, begun = started + 1, budget - 1, begun + 1
        context.busy = True
    status["started"] = started
    if started < total and budget:
        decision.wake_at = context.now  # the rest of the targets, in the next decision
    return begun


def _skip_started_elsewhere(
    context: RequestContext,
    request: RunRequestView,
    targets: list[ReplayTarget],
    status: dict[str, Any],
    decision: Decision,
) -> None:
    """Targets beyond the cursor whose holder has started their run are skipped at once, not
    when the cursor comes to them: the holder may be deleted meanwhile, and its Jobs with it,
    and then nothing would tell that the run was replayed."""
    skipped = parse_indexes(status.get("skippedIndexes"))
    for index in range(count(status, "started"), len(targets)):
        target = targets[index]
        if index in skipped or target.held_by is None:
            continue
        own = request_job_name(context.name, TRIGGER_REPLAY, request.uid, index)
        if any(job.name == own for job in context.owned):
            continue  # started by this request before its cursor was written: it ran here
        holder = target.held_by
        if _same_run(context, holder, target.run) and _started_by(context, holder, decision):
            _skip_target(request, status, index, target, _requested(holder), decision)


def _replayed_elsewhere(
    context: RequestContext, spec: RequestSpec, target: ReplayTarget, decision: Decision
) -> tuple[str, str] | None:
    """Why this replay must not run the target (an Event's reason and words), if it must not:
    its holder replayed the run, replays it or still may; or, replaying the dead letters, the run
    is a dead letter no more, since some replay relabelled it (a holder before this rule)."""
    holder = target.held_by
    if holder is not None and _holds(context, holder, target.run, decision):
        return _requested(holder)
    if spec.dead_letters and context.outcomes.get(target.run) is RunOutcome.REPLAYED:
        return "SkippedAlreadyReplayed", "it is a dead letter no more: it was replayed"
    return None


def _requested(holder: Holder) -> tuple[str, str]:
    return "SkippedAlreadyRequested", f"request {holder.name} replays it"


def _holds(context: RequestContext, holder: Holder, run: str, decision: Decision) -> bool:
    """Whether the request that held `run` at this one's acceptance replayed it, replays it or
    may still: it started it, or it exists and has not failed before starting it. One deleted
    before starting it left it, unless a replay (its, lost with it) relabelled the dead letter."""
    if not _same_run(context, holder, run):
        return False
    if _started_by(context, holder, decision):
        return True
    status = context.statuses.get(holder.uid)
    if status is None:
        return context.outcomes.get(run) is RunOutcome.REPLAYED
    if holder.index in parse_indexes(status.get("skippedIndexes")):
        return False  # it left the run to its own holder: judged by this request's own rules
    if status.get("phase") == RequestPhase.FAILED:
        return holder.index < count(status, "started")
    return True


def _same_run(context: RequestContext, holder: Holder, run: str) -> bool:
    """Whether the holder's target is still `run`: a holder whose acceptance was lost is
    accepted again, and its targets may have moved (dead letters came or went meanwhile)."""
    status = context.statuses.get(holder.uid)
    targets = replay_targets(status) if status is not None else None
    if targets is None:
        return True  # gone, or not accepted (again) yet: its index is all there is to go by
    return holder.index < len(targets) and targets[holder.index].run == run


def _started_by(context: RequestContext, holder: Holder, decision: Decision) -> bool:
    """Whether the holder's target has a run: a Job, or one this decision creates."""
    planned = (run.request for run in decision.runs)
    return any(
        job.request_uid == holder.uid and job.request_index == holder.index for job in context.owned
    ) or any(p is not None and (p.uid, p.index) == (holder.uid, holder.index) for p in planned)


def _skip_target(
    request: RunRequestView,
    status: dict[str, Any],
    index: int,
    target: ReplayTarget,
    why: tuple[str, str],
    decision: Decision,
) -> None:
    """Recorded in status (`skippedIndexes`, `skipped`) and said in a Normal Event."""
    skipped = parse_indexes(status.get("skippedIndexes")) | {index}
    _set_indexes(status, "skipped", skipped)
    reason, words = why
    decision.events.append(
        EventRecord(
            EventType.NORMAL,
            reason,
            f"target {index} (run {target.run}, slot {format_time(target.slot)}) not run: {words}",
            request.ref,
        )
    )


def _mark_replayed(
    context: RequestContext,
    request: RunRequestView,
    status: dict[str, Any],
    by_index: dict[int, Run],
    decision: Decision,
) -> None:
    """A dead letter whose replay has a run is a dead letter no more: labelled replayed, it is
    history again (kept by the history limits, not by its retention). Checked for every started
    target at every decision, completed requests included, so that a label write lost with a
    crash is made by a later decision. A backfill has no targets in status: nothing to do."""
    replays = replay_targets(status) or []
    planned = {
        run.request.index
        for run in decision.runs
        if run.request is not None and run.request.uid == request.uid
    }
    for index, target in enumerate(replays[: count(status, "started")]):
        if index not in by_index and index not in planned:
            continue
        original = context.runs.get(target.run)
        if original is not None and context.outcomes[target.run] in _DEAD:
            latest = original.latest
            decision.labels.append(
                PlannedLabel(
                    latest.name, latest.uid, LABEL_DEAD_LETTER, DEAD_LETTER_REPLAYED, latest.kind
                )
            )


def _fail(
    request: RunRequestView, status: dict[str, Any], message: str, decision: Decision
) -> None:
    """The request cannot go on: said once, in its status and in one Warning Event."""
    if status.get("phase") == RequestPhase.FAILED and status.get("message") == message:
        return
    status.update(phase=RequestPhase.FAILED.value, message=message)
    decision.events.append(EventRecord(EventType.WARNING, "RequestFailed", message, request.ref))


def plan_waiting(scheduled_job: str, requests: Sequence[RunRequestView], now: datetime) -> Decision:
    """The requests for a ScheduledJob that does not exist, or is being deleted. One not yet
    accepted is Pending, said once (status and a Warning Event), and accepted if the ScheduledJob
    comes (GitOps may apply them first); one that was running fails: its runs went with it."""
    decision = Decision()
    for request in requests:
        phase = request.status.get("phase")
        if phase in (None, RequestPhase.PENDING):
            new_phase, reason = RequestPhase.PENDING, "RequestPending"
            message = f"ScheduledJob {scheduled_job} not found (or being deleted)"
        elif phase == RequestPhase.RUNNING:
            new_phase, reason = RequestPhase.FAILED, "RequestFailed"
            message = f"ScheduledJob {scheduled_job} was deleted while the request ran"
        else:
            continue
        if request.status.get("message") == message:
            continue
        status = {**request.status, "phase": new_phase.value, "message": message}
        summarize_request(status, request.generation, now)
        decision.requests.append(
            RequestStatus(request.ref, request.version, request.status, status)
        )
        decision.events.append(EventRecord(EventType.WARNING, reason, message, request.ref))
    return decision
