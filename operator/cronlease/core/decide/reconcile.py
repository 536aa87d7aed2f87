"""decide(): given a ScheduledJob, the Jobs it owns and the time, what to do now.

A pure function: it reads nothing but its arguments and returns a Decision that the shell applies
(create, delete, write status, post events). Everything the operator promises about slots lives
here, so it is tested table by table without a cluster.

The exactly-once cursor is `status.processedUntil`: every slot at or before it was either run or
recorded as skipped. Slots after it and not after `now` are due. A run's Job name is a function of
its slot, so if the shell crashes between creating a Job and writing the cursor, the next decision
plans the same name again and the API server's AlreadyExists stops a second Job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.decide.decision import (
    EXPECTED_SKIPS,
    Decision,
    DeletionReason,
    EventRecord,
    EventType,
    PlannedDeletion,
    PlannedLabel,
    PlannedRelease,
    PlannedRun,
    RequestTarget,
    ScheduledJobView,
    SkippedSlots,
    SkipReason,
)
from cronlease.core.decide.overlap import plan_queue
from cronlease.core.decide.pausing import PAUSED, update_pause
from cronlease.core.decide.requestplan import RequestContext, plan_requests, settled_request_runs
from cronlease.core.decide.runrequest import RunRequestView
from cronlease.core.decide.runs import ONGOING, Run, RunOutcome, runs_of
from cronlease.core.names.conditions import (
    Summary,
    find_condition,
    is_true,
    remove_condition,
    set_condition,
    summarize,
)
from cronlease.core.names.jobinfo import NOT_RETRYABLE, JobInfo, JobState
from cronlease.core.names.naming import (
    ANNOTATION_RESUME,
    ANNOTATION_RUN_NOW,
    GROUP,
    LABEL_DEAD_LETTER,
    LABEL_RETRIED,
    REQUEST_TRIGGERS,
    RUN_KIND,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    VERSION,
    attempt_job_name,
    first_cursor,
    format_time,
    manual_job_name,
    parse_time,
    scheduled_job_name,
)
from cronlease.core.schedule.jitter import jitter
from cronlease.core.specs.policies import MAX_ATTEMPTS, RetryPolicy, SpecError
from cronlease.core.specs.spec import BUFFERING, ConcurrencyPolicy, Spec, parse_spec

REPLACING = frozenset({ConcurrencyPolicy.REPLACE, ConcurrencyPolicy.CANCEL_OTHER})
# How late the scheduler may handle a slot and still call it on time. It covers the loop's wake-up
# and a burst of creations, so that startingDeadlineSeconds: 0 means "only if on time" and on-time
# slots really run (CronJob always wakes ~100 ms late, so its deadline 0 never runs anything).
ON_TIME_TOLERANCE = timedelta(seconds=1)
RECENT_RUNS = 10
# status.deadLetters lists at most this many (the newest); the labelled Jobs are all of them.
DEAD_LETTERS = 20
# status.active lists at most this many Jobs (oldest first); activeCount counts them all. Allow
# with long runs can keep thousands active, and status must stay a small object.
ACTIVE_REFS = 100
# Due slots enumerated one by one; older ones (after a long outage) are only counted.
MAX_ENUMERATED_SLOTS = 1000
# Missed slots one decision may still run (within their deadline); older ones are superseded.
MAX_CATCH_UP_RUNS = 100
# status.observedSchedule of an invalid spec.
INVALID = "<invalid>"
_JOB_KIND = {"apiVersion": "batch/v1", "kind": "Job"}
# Sorts a Job without any timestamp as the oldest.
_THE_BEGINNING = datetime.min.replace(tzinfo=UTC)


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
        return _invalid(sj, jobs, requests, str(error), now)
    refused = sj.status.get("templateError") or {}
    if refused.get("generation") == sj.generation:
        message = f"spec.jobTemplate: {refused.get('message', '')}"
        return _invalid(sj, jobs, requests, message, now)
    decision = Decision(keep_runs_held=spec.retry is not None)
    status = dict(sj.status)
    cursor = _cursor(sj, spec, status, now, decision)
    runs = runs_of(owned)
    outcomes = {name: run.outcome(spec.retry) for name, run in runs.items()}
    # A run waiting for its next attempt is active for the concurrency policy.
    waiting = [runs[name].latest for name, o in outcomes.items() if o is RunOutcome.RETRYING]
    ended = _ended_results(status.get("recentRuns") or [], runs, outcomes)
    resume = sj.annotations.get(ANNOTATION_RESUME)
    paused, events = update_pause(spec.pause_on_failure, ended, resume, status, sj.generation, now)
    decision.events += events

    due, uncounted = _due_slots(sj, spec, cursor, now)
    halted = _halted(sj, spec, paused)
    queued: list[datetime] = []
    if due:
        queued = _handle_due_slots(
            sj, spec, owned, waiting, taken, due, uncounted, halted, now, decision
        )
        cursor = due[-1]
    # Before run-now and next attempts: a slot CancelOther starts ends what runs, and a run-now
    # in the same decision then waits (as under Forbid) rather than being cancelled next time.
    _run_queue(sj, spec, owned, waiting, taken, halted, queued, status, now, decision)
    _handle_run_now(sj, spec, owned, waiting, taken, now, decision, status)
    # After the new runs: a run that Replace or CancelOther has just ended gets no next attempt.
    _plan_attempts(sj, spec, runs, outcomes, taken, now, decision)
    # Last: a request's run starts only when no other run is planned, under Forbid.
    context = RequestContext(
        sj.name,
        spec,
        owned,
        runs,
        outcomes,
        taken,
        busy=bool(
            _live(owned, decision, JobState.ACTIVE)
            or waiting
            or decision.runs
            or (spec.concurrency_policy is ConcurrencyPolicy.CANCEL_OTHER and _clearing(owned))
        ),
        max_attempts=_max_attempts(spec),
        now=now,
    )
    plan_requests(context, requests, decision)
    kept_held = _plan_history_cleanup(spec, owned, runs, outcomes, context.keep, now, decision)
    ongoing = frozenset(name for name, run in runs.items() if run.holds(spec.retry))
    settled = settled_request_runs(requests, jobs)
    _plan_releases(sj, jobs, decision, settled, ongoing, kept_held)
    _write_status(sj, spec, owned, runs, outcomes, status, cursor, paused, now, decision)
    decision.status = status
    if not (spec.suspend or paused) and (following := _next_slot(spec, cursor, now)) is not None:
        decision.wake_at = _earliest(decision.wake_at, _start(sj, spec, following))
    return decision


def _earliest(*instants: datetime | None) -> datetime | None:
    return min((instant for instant in instants if instant is not None), default=None)


def _invalid(
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
    _plan_releases(sj, jobs, decision, settled_request_runs(requests, jobs), ongoing)
    return decision


def _cursor(
    sj: ScheduledJobView, spec: Spec, status: dict[str, Any], now: datetime, decision: Decision
) -> datetime | None:
    """Where processing resumes. A new or edited schedule starts at creation or at the edit, so an
    edit never runs a slot retroactively; a new runAt runs if it is after the cursor.

    No edit moves processedUntil back: every instant at or before it was run or recorded as
    skipped, under whatever schedule or runAt held then, and the Jobs that showed it may be gone
    (TTL, history cleanup). So a runAt reverted to an instant that ran (X, Y, X again), or set to
    a slot its schedule ran, is recorded as skipped (AlreadyProcessed), and a schedule edit by a
    leader whose clock is behind resumes from the cursor, not from its own now."""
    observed = status.get("observedSchedule")
    processed = parse_time(status.get("processedUntil"))
    if observed == spec.trigger_key:
        if processed is None and spec.schedule is not None:
            return now  # a status edited by hand: resume from now rather than guess
        return processed
    status["observedSchedule"] = spec.trigger_key
    if spec.run_at is not None:
        if processed is not None and spec.run_at <= processed:
            _skip_processed(decision, spec.run_at, processed)
        return processed
    if observed is not None:
        resume = now if processed is None else max(now, processed)
        decision.events.append(
            EventRecord(
                EventType.NORMAL,
                "ScheduleChanged",
                f"schedule is now {spec.schedule.expression if spec.schedule else ''!s} "
                f"({spec.schedule.time_zone if spec.schedule else ''}); slots before "
                f"{format_time(resume)} will not run",
            )
        )
        return resume
    return first_cursor(sj.created_at, sj.annotations)


def _skip_processed(decision: Decision, run_at: datetime, processed: datetime) -> None:
    """A runAt edited to an instant the object has processed: counted once, at the edit (the
    next decisions see it processed, as after it ran), and said in words a user can act on."""
    reason = SkipReason.ALREADY_PROCESSED
    decision.skips.append(SkippedSlots(reason, 1, run_at))
    decision.events.append(
        EventRecord(
            EventType.NORMAL,
            f"Skipped{reason.value}",
            f"runAt {format_time(run_at)} not run: it is at or before processedUntil "
            f"{format_time(processed)}, and an instant this ScheduledJob processed (ran or "
            "skipped) never runs again; to run again, use the cronlease.io/run-now annotation "
            "or a RunRequest, or set runAt after processedUntil",
        )
    )


def _plan_attempts(
    sj: ScheduledJobView,
    spec: Spec,
    runs: dict[str, Run],
    outcomes: dict[str, RunOutcome],
    taken: frozenset[str],
    now: datetime,
    decision: Decision,
) -> None:
    """The next attempt of each failed run whose delay has passed; a dead letter for each run
    with no attempt left. A suspended ScheduledJob starts no attempt (its runs wait)."""
    doomed = {deletion.uid for deletion in decision.deletions}
    for run in runs.values():
        decision.labels += [
            PlannedLabel(job.name, job.uid, LABEL_RETRIED, kind=job.kind) for job in run.unmarked
        ]
    retry = spec.retry
    if retry is None:
        return
    for name, outcome in sorted(outcomes.items()):
        latest = runs[name].latest
        if latest.uid in doomed:  # ended by Replace in this decision
            continue
        if outcome is RunOutcome.EXHAUSTED:
            decision.labels.append(
                PlannedLabel(latest.name, latest.uid, LABEL_DEAD_LETTER, kind=latest.kind)
            )
            why = _dead_letter_reason(latest)
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
            decision.wake_at = _earliest(decision.wake_at, due)
            continue
        attempt = latest.attempt + 1
        job_name = attempt_job_name(sj.name, name, attempt)
        if job_name in taken:
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


def _max_attempts(spec: Spec) -> int:
    return spec.retry.max_attempts if spec.retry else 0


def _dead_letter_reason(job: JobInfo) -> str:
    return NOT_RETRYABLE if job.failure_reason == NOT_RETRYABLE else "AttemptsExhausted"


def _due_slots(
    sj: ScheduledJobView, spec: Spec, cursor: datetime | None, now: datetime
) -> tuple[list[datetime], int]:
    """Due slots, oldest first, and how many older ones were only counted, not listed. Under
    jitter, the newest slot is not due until its start (earlier ones have started: a start is
    before the next slot)."""
    if spec.run_at is not None:
        processed = cursor is not None and cursor >= spec.run_at
        return ([spec.run_at] if not processed and spec.run_at <= now else []), 0
    assert spec.schedule is not None
    assert cursor is not None
    due = spec.schedule.slots_between(cursor, now, limit=MAX_ENUMERATED_SLOTS)
    uncounted = 0
    if len(due) == MAX_ENUMERATED_SLOTS:
        uncounted = spec.schedule.count_between(cursor, now) - len(due)
    if due and _start(sj, spec, due[-1]) > now:
        due.pop()  # the cursor stays before it; the decision wakes at its start
    return due, uncounted


def _start(sj: ScheduledJobView, spec: Spec, slot: datetime) -> datetime:
    """When a slot's run is due: the slot, plus its jitter (cronlease.core.schedule.jitter) if
    any."""
    if not spec.jitter_seconds or spec.schedule is None:
        return slot
    following = spec.schedule.next_after(slot)
    gap = following - slot if following is not None else None
    return slot + jitter(sj.namespace, sj.name, slot, spec.jitter_seconds, gap)


def _late(spec: Spec, start: datetime, now: datetime) -> bool:
    """Whether a run due at `start` is past spec.startingDeadlineSeconds (counted from the start,
    so a jitter never makes a run late)."""
    deadline = spec.starting_deadline_seconds
    return deadline is not None and now - start > timedelta(seconds=deadline) + ON_TIME_TOLERANCE


def _handle_due_slots(
    sj: ScheduledJobView,
    spec: Spec,
    owned: Sequence[JobInfo],
    waiting: Sequence[JobInfo],
    taken: frozenset[str],
    due: list[datetime],
    uncounted: int,
    halted: SkipReason | None,
    now: datetime,
    decision: Decision,
) -> list[datetime]:
    """Run, skip or record each due slot; the slots that go to the queue of a buffering policy
    (cronlease.core.decide.overlap) instead are returned."""

    def planned(slot: datetime) -> PlannedRun:
        return _planned_slot(sj, spec, slot)

    def late(slot: datetime) -> bool:
        return _late(spec, _start(sj, spec, slot), now)

    # A slot that already has a Job ran, whatever the policy says now (its record was lost with
    # a crash or a lost response): it is recorded as a run and never counted as skipped.
    pending = [slot for slot in due if not _record_if_exists(decision, owned, planned(slot))]
    conflicts = [slot for slot in pending if planned(slot).job_name in taken]
    if conflicts:
        _skip(decision, SkipReason.NAME_CONFLICT, len(conflicts), conflicts[-1])
        pending = [slot for slot in pending if slot not in conflicts]
    # Slots only counted, never listed, are older than due[0]: late if it is, else superseded.
    uncounted_late = uncounted if late(due[0]) else 0
    if halted is not None:
        # Suspended or paused, or until this decision (it was resumed since): slots of the halt
        # are recorded once, when a decision happens, not with a wake-up and a write each.
        if pending or uncounted:
            _skip(decision, halted, len(pending) + uncounted, (pending or due)[-1])
        return []
    too_late = [slot for slot in pending if late(slot)]
    timely = pending[len(too_late) :]  # ascending, so the late ones are a prefix
    # catchUp All (or, unset, Allow with a deadline): a slot still within its deadline is still
    # worth running, so after a failover or an outage every one of them runs, where CronJob runs
    # only the newest (catchUp Latest). Under Replace or CancelOther each would end the one before.
    every = spec.catches_up_all and spec.concurrency_policy not in REPLACING
    runnable = timely[-MAX_CATCH_UP_RUNS:] if every else timely[-1:]
    superseded = timely[: len(timely) - len(runnable)]
    if too_late or uncounted_late:
        _skip(
            decision,
            SkipReason.DEADLINE_EXCEEDED,
            len(too_late) + uncounted_late,
            (too_late or due)[-1 if too_late else 0],
        )
    if superseded or uncounted - uncounted_late:
        count = len(superseded) + uncounted - uncounted_late
        _skip(decision, SkipReason.SUPERSEDED, count, superseded[-1] if superseded else due[0])
    if spec.concurrency_policy in BUFFERING:
        return runnable
    for slot in runnable:
        if _admit(spec, owned, waiting, decision, slot, TRIGGER_SCHEDULE):
            decision.runs.append(planned(slot))
    return []


def _planned_slot(sj: ScheduledJobView, spec: Spec, slot: datetime) -> PlannedRun:
    # A runAt instant has seconds precision: naming it by minute could collide after an edit.
    with_seconds = spec.schedule.has_seconds if spec.schedule else True
    name = scheduled_job_name(sj.name, slot, with_seconds)
    start = _start(sj, spec, slot)
    return PlannedRun(name, slot, TRIGGER_SCHEDULE, max_attempts=_max_attempts(spec), start=start)


def _run_queue(
    sj: ScheduledJobView,
    spec: Spec,
    owned: Sequence[JobInfo],
    waiting: Sequence[JobInfo],
    taken: frozenset[str],
    halted: SkipReason | None,
    fresh: list[datetime],
    status: dict[str, Any],
    now: datetime,
    decision: Decision,
) -> None:
    """The slots waiting in status.buffered, and those just due under a buffering policy: start one
    when nothing runs, keep what the policy keeps, record the rest
    (cronlease.core.decide.overlap)."""
    waiting_before = set(_buffered(status))
    # An edit of the schedule started afresh (cronlease says so in ScheduleChanged): slots that
    # waited under the old one do not run.
    edited = sj.status.get("observedSchedule") not in (None, spec.trigger_key)
    kept: list[datetime] = []
    dropped: dict[SkipReason, list[datetime]] = {}
    for slot in sorted(waiting_before | set(fresh)):
        run = _planned_slot(sj, spec, slot)
        # Found by its slot, not by its name: an edit may have changed how Jobs are named.
        existing = next(
            (
                job
                for job in owned
                if job.slot == slot and job.trigger == TRIGGER_SCHEDULE and job.attempt == 1
            ),
            None,
        )
        if existing is not None:  # it ran: its status write was lost
            decision.recorded.append((dataclasses.replace(run, job_name=existing.name), existing))
            continue
        if run.job_name in taken:
            reason: SkipReason | None = SkipReason.NAME_CONFLICT
        elif edited and slot in waiting_before:
            reason = SkipReason.SUPERSEDED
        elif halted is not None:
            reason = halted
        elif spec.concurrency_policy not in BUFFERING:
            reason = SkipReason.SUPERSEDED  # the policy was changed: nothing waits any more
        elif _late(spec, _start(sj, spec, slot), now):
            reason = SkipReason.DEADLINE_EXCEEDED
        else:
            reason = None
        if reason is None:
            kept.append(slot)
        else:
            dropped.setdefault(reason, []).append(slot)
    doomed = {deletion.uid for deletion in decision.deletions}
    active = _live(owned, decision, JobState.ACTIVE)
    active += [job for job in waiting if job.uid not in doomed]
    busy = bool(active or decision.runs)
    plan = plan_queue(
        spec.concurrency_policy, spec.buffer_limit, kept, busy, bool(_clearing(owned))
    )
    if plan.start is not None:
        # Waiting was the policy's doing: the lag counts from when the run could start.
        decision.runs.append(dataclasses.replace(_planned_slot(sj, spec, plan.start), start=now))
    dropped.setdefault(SkipReason.BUFFER_FULL, []).extend(plan.full)
    dropped.setdefault(SkipReason.SUPERSEDED, []).extend(plan.superseded)
    for reason, slots in dropped.items():
        if slots:
            _skip(decision, reason, len(slots), max(slots))
    if plan.cancel:
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.CANCEL_OTHER, job.kind)
            for job in active
        ]
    if plan.waiting:
        status["buffered"] = [format_time(slot) for slot in plan.waiting]
    else:
        status.pop("buffered", None)


def _clearing(owned: Sequence[JobInfo]) -> list[JobInfo]:
    """Runs being deleted that had not ended: their pods may still run (CancelOther waits)."""
    return [job for job in owned if job.deleting and job.state is JobState.ACTIVE]


def _buffered(status: dict[str, Any]) -> list[datetime]:
    """status.buffered as instants; only the operator writes it (the fence keeps the rest out),
    but an entry it cannot read is dropped rather than trusted."""
    entries = status.get("buffered")
    if not isinstance(entries, list):
        return []
    return [slot for entry in entries if (slot := parse_time(entry)) is not None]


def _halted(sj: ScheduledJobView, spec: Spec, paused: bool) -> SkipReason | None:
    """Why due slots are skipped rather than run, if they are: a suspension or a pause, now or
    until this decision (lifting either never runs the slots that came due meanwhile)."""
    if spec.suspend or is_true(sj.status.get("conditions"), "Suspended"):
        return SkipReason.SUSPENDED
    if paused or is_true(sj.status.get("conditions"), PAUSED):
        return SkipReason.PAUSED
    return None


def _ended_results(
    previous: list[dict[str, Any]], runs: dict[str, Run], outcomes: dict[str, RunOutcome]
) -> list[str]:
    """The results of the runs that recentRuns listed unfinished and that have ended since, in
    the order they ended."""
    ended: list[tuple[datetime, str]] = []
    for entry in previous:
        name = entry.get("run") or entry.get("job", "")
        if name not in runs or outcomes[name] is RunOutcome.SUPERSEDED:
            continue
        result = RESULTS[outcomes[name]]
        if entry.get("result") in _UNFINISHED and result not in _UNFINISHED:
            ended.append((runs[name].latest.history_time or _THE_BEGINNING, result))
    return [result for _, result in sorted(ended, key=lambda pair: pair[0])]


def _record_if_exists(decision: Decision, owned: Sequence[JobInfo], run: PlannedRun) -> bool:
    existing = next((job for job in owned if job.name == run.job_name), None)
    if existing is not None:
        decision.recorded.append((run, existing))
    return existing is not None


def _admit(
    spec: Spec,
    owned: Sequence[JobInfo],
    waiting: Sequence[JobInfo],
    decision: Decision,
    slot: datetime,
    trigger: str,
) -> bool:
    """Apply the concurrency policy to one run, on the live model of Jobs (not on status). A run
    waiting for its next attempt counts as active: Forbid waits for it, Replace ends it."""
    doomed = {deletion.uid for deletion in decision.deletions}
    active = _live(owned, decision, JobState.ACTIVE) + [
        job for job in waiting if job.uid not in doomed
    ]
    if spec.concurrency_policy is ConcurrencyPolicy.CANCEL_OTHER:
        # A run deleted (now or by this decision) runs until it is gone.
        cancelling = {d.uid for d in decision.deletions if d.reason is DeletionReason.CANCEL_OTHER}
        active += _clearing(owned) + [job for job in owned if job.uid in cancelling]
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
            _skip(decision, SkipReason.CONCURRENCY_FORBID, 1, slot)
        return False
    if spec.concurrency_policy is ConcurrencyPolicy.REPLACE:
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.REPLACE, job.kind) for job in active
        ]
    return True


def _live(owned: Sequence[JobInfo], decision: Decision, state: JobState) -> list[JobInfo]:
    """The owned Jobs in `state` that stay: neither being deleted nor planned for deletion."""
    doomed = {deletion.uid for deletion in decision.deletions}
    return [
        job for job in owned if job.state is state and not job.deleting and job.uid not in doomed
    ]


def _skip(decision: Decision, reason: SkipReason, count: int, latest: datetime) -> None:
    decision.skips.append(SkippedSlots(reason, count, latest))
    decision.events.append(
        EventRecord(
            EventType.NORMAL if reason in EXPECTED_SKIPS else EventType.WARNING,
            f"Skipped{reason.value}",
            f"skipped {count} slot(s) ({reason.value}); latest {format_time(latest)}",
        )
    )


def _handle_run_now(
    sj: ScheduledJobView,
    spec: Spec,
    owned: Sequence[JobInfo],
    waiting: Sequence[JobInfo],
    taken: frozenset[str],
    now: datetime,
    decision: Decision,
    status: dict[str, Any],
) -> None:
    """A new value of the run-now annotation starts one run, acknowledged in status."""
    token = sj.annotations.get(ANNOTATION_RUN_NOW)
    if not token or token == status.get("runNowToken"):
        return
    if decision.runs:
        decision.wake_at = now  # one run per decision; the request is handled right after
        return
    status["runNowToken"] = token
    name = manual_job_name(sj.name, token)
    run = PlannedRun(name, now, TRIGGER_MANUAL, token, max_attempts=_max_attempts(spec))
    if _record_if_exists(decision, owned, run):
        return
    if run.job_name in taken:
        decision.events.append(
            EventRecord(
                EventType.WARNING,
                "RunNowConflict",
                f"run-now refused: Job {run.job_name} exists and was not created by cronlease",
            )
        )
        return
    if _admit(spec, owned, waiting, decision, now, TRIGGER_MANUAL):
        decision.runs.append(run)


def _plan_history_cleanup(
    spec: Spec,
    owned: Sequence[JobInfo],
    runs: dict[str, Run],
    outcomes: dict[str, RunOutcome],
    unrecorded: set[str],
    now: datetime,
    decision: Decision,
) -> frozenset[str]:
    """Keep the newest finished Jobs by completion time (falling back to start time). The
    attempts of a run still going on are not history yet, nor a request's run whose result the
    request has not recorded (`unrecorded`); a dead letter is kept until its retention passes,
    whatever the limits: held, so that no TTL takes it sooner. Returns the uids of the dead
    letters so kept."""
    kept = {
        job.uid
        for name, outcome in outcomes.items()
        if outcome in ONGOING
        for job in runs[name].attempts
    } | unrecorded
    letters: set[str] = set()
    if spec.retry is not None:
        retention = timedelta(seconds=spec.retry.dead_letter_retention_seconds)
        for name, outcome in outcomes.items():
            latest = runs[name].latest
            if outcome is not RunOutcome.DEAD_LETTERED:
                continue
            kept.add(latest.uid)
            expires = (latest.finished_at or now) + retention
            if expires <= now:
                decision.deletions.append(
                    PlannedDeletion(
                        latest.name, latest.uid, DeletionReason.DEAD_LETTER_EXPIRED, latest.kind
                    )
                )
            else:
                letters.add(latest.uid)
                decision.wake_at = _earliest(decision.wake_at, expires)
    limits = {
        JobState.SUCCEEDED: spec.successful_jobs_history_limit,
        JobState.FAILED: spec.failed_jobs_history_limit,
    }
    for state, limit in limits.items():
        finished = [job for job in _live(owned, decision, state) if job.uid not in kept]
        finished.sort(key=lambda job: (job.history_time or _THE_BEGINNING, job.name))
        excess = finished[: max(0, len(finished) - limit)]
        decision.deletions += [
            PlannedDeletion(job.name, job.uid, DeletionReason.HISTORY_LIMIT, job.kind)
            for job in excess
        ]
    return frozenset(letters)


def _plan_releases(
    sj: ScheduledJobView,
    jobs: Sequence[JobInfo],
    decision: Decision,
    settled_requests: set[str],
    ongoing: frozenset[str] = frozenset(),
    kept_held: frozenset[str] = frozenset(),
) -> None:
    """The slot-record finalizer of a Job goes once nothing can run its slot again: its run is
    recorded in the status as persisted (what this decision read, not what it will write), or
    the Job is not a run of this ScheduledJob at all (the finalizer is never ours to keep then).
    With retries, the attempts of a run that has not ended (`ongoing`) stay held: the next
    attempt is decided from them. A RunRequest's run is recorded once its request has recorded
    its result, or is gone."""
    processed = parse_time(sj.status.get("processedUntil"))
    # A slot still listed as waiting is not recorded: its run's record is the status write that
    # takes it off the list.
    waiting = set(_buffered(sj.status))
    acknowledged = sj.status.get("runNowToken")
    requested = sj.annotations.get(ANNOTATION_RUN_NOW)
    for job in jobs:
        if not job.held:
            continue
        if not job.trusted or job.owner_uid != sj.uid:
            recorded = True
        elif job.run_name in ongoing or job.uid in kept_held:
            recorded = False
        elif job.trigger in REQUEST_TRIGGERS:
            recorded = job.run_name in settled_requests
        elif job.trigger == TRIGGER_MANUAL:
            # A token no longer requested is never run again; the current one once acknowledged.
            recorded = job.run_now_token in (acknowledged, None) or job.run_now_token != requested
        else:
            recorded = (
                processed is not None
                and job.slot is not None
                and job.slot <= processed
                and job.slot not in waiting
            )
        if recorded:
            decision.releases.append(PlannedRelease(job.name, job.uid, job.kind))


def _write_status(
    sj: ScheduledJobView,
    spec: Spec,
    owned: Sequence[JobInfo],
    runs: dict[str, Run],
    outcomes: dict[str, RunOutcome],
    status: dict[str, Any],
    cursor: datetime | None,
    paused: bool,
    now: datetime,
    decision: Decision,
) -> None:
    active = sorted(
        [job.name for job in _live(owned, decision, JobState.ACTIVE)]
        + [run.job_name for run in decision.runs]
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
    next_slot = None if spec.suspend or paused else _next_slot(spec, cursor, now)
    status["nextScheduleTime"] = format_time(next_slot) if next_slot else None
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
    status["recentRuns"] = _recent_runs(
        status.get("recentRuns") or [], runs, outcomes, spec.retry, decision, now
    )
    dead_letters = _dead_letters(runs, outcomes)
    if dead_letters:
        status["deadLetters"] = dead_letters
    else:
        status.pop("deadLetters", None)
    status["observedGeneration"] = sj.generation
    status["conditions"] = _conditions(sj, spec, owned, status, cursor, now)


def _times(text: str | None) -> list[datetime]:
    parsed = parse_time(text)
    return [parsed] if parsed else []


# What recentRuns says of a run, by its outcome.
RESULTS = {
    RunOutcome.ACTIVE: "Active",
    RunOutcome.SUCCEEDED: "Succeeded",
    RunOutcome.FAILED: "Failed",
    RunOutcome.RETRYING: "Retrying",
    RunOutcome.EXHAUSTED: "DeadLettered",
    RunOutcome.DEAD_LETTERED: "DeadLettered",
    RunOutcome.CANCELLED: "Deleted",
    RunOutcome.REPLAYED: "Replayed",
}
_UNFINISHED = frozenset({"Active", "Retrying"})


def _recent_runs(
    previous: list[dict[str, Any]],
    runs: dict[str, Run],
    outcomes: dict[str, RunOutcome],
    retry: RetryPolicy | None,
    decision: Decision,
    now: datetime,
) -> list[dict[str, Any]]:
    """The last runs, oldest first, each with its current attempt and result. A run that needed
    more than one attempt and then succeeded gets a RunSucceeded Event, and a run that failed
    with no retries a RunFailed Warning, once: when its entry turns from unfinished to that."""
    entries = []
    for entry in previous:
        entry = dict(entry)
        name = entry.get("run") or entry.get("job", "")
        run = runs.get(name)
        if run is not None and outcomes[name] is RunOutcome.SUPERSEDED:
            pass  # its later attempts are gone: the entry keeps what it said of them
        elif run is not None:
            latest = run.latest
            result = RESULTS[outcomes[name]]
            ended = entry.get("result") in _UNFINISHED
            if result == "Succeeded" and ended and latest.attempt > 1:
                decision.events.append(
                    EventRecord(
                        EventType.NORMAL,
                        "RunSucceeded",
                        f"run {name} succeeded at attempt {latest.attempt}",
                    )
                )
            elif result == "Failed" and ended:  # with no attempt left to make: DeadLettered
                why = f" ({latest.failure_reason})" if latest.failure_reason else ""
                decision.events.append(
                    EventRecord(EventType.WARNING, "RunFailed", f"run {name} failed{why}")
                )
            entry["result"] = result
            entry["job"] = latest.name
            if retry is not None:
                entry.update(run=name, attempts=latest.attempt)
            if latest.finished and latest.finished_at:
                entry["finishedAt"] = format_time(latest.finished_at)
        elif entry.get("result") in _UNFINISHED:
            entry["result"] = "Deleted"
        entries.append(entry)
    by_run = {entry.get("run") or entry.get("job"): entry for entry in entries}
    new = [(run, now) for run in decision.runs]
    new += [(run, job.created_at or now) for run, job in decision.recorded]
    for planned, created in sorted(new, key=lambda pair: pair[0].slot):
        listed = by_run.get(planned.run_name)
        if listed is not None and planned.attempt > 1:  # the next attempt of a listed run
            listed.update(job=planned.job_name, attempts=planned.attempt, result="Active")
            listed.pop("finishedAt", None)
            continue
        entry = {
            "slot": format_time(planned.slot),
            "job": planned.job_name,
            "trigger": planned.trigger,
            "result": "Active",
        }
        if planned.request is None:  # a request's slot is past by design: no lag to speak of
            due = planned.start or planned.slot
            entry["lagSeconds"] = round((created - due).total_seconds(), 3)
        if retry is not None:
            entry.update(run=planned.run_name, attempts=planned.attempt)
        entries.append(entry)
    # Beyond the limit, the oldest finished entries go first: an unfinished one stays until its
    # result is read (spec.pauseOnFailure counts results as entries turn finished).
    finished = [
        index for index, entry in enumerate(entries) if entry.get("result") not in _UNFINISHED
    ]
    dropped = set(finished[: max(len(entries) - RECENT_RUNS, 0)])
    return [entry for index, entry in enumerate(entries) if index not in dropped][-RECENT_RUNS:]


def _dead_letters(runs: dict[str, Run], outcomes: dict[str, RunOutcome]) -> list[dict[str, Any]]:
    letters = []
    for name, outcome in outcomes.items():
        latest = runs[name].latest
        if outcome not in (RunOutcome.EXHAUSTED, RunOutcome.DEAD_LETTERED) or latest.slot is None:
            continue
        letter: dict[str, Any] = {
            "run": name,
            "job": latest.name,
            "slot": format_time(latest.slot),
            "attempts": latest.attempt,
            "reason": _dead_letter_reason(latest),
        }
        if latest.finished_at:
            letter["failedAt"] = format_time(latest.finished_at)
        letters.append(letter)
    letters.sort(key=lambda letter: (letter.get("failedAt", ""), letter["run"]))
    return letters[-DEAD_LETTERS:]


def _conditions(
    sj: ScheduledJobView,
    spec: Spec,
    owned: Sequence[JobInfo],
    status: dict[str, Any],
    cursor: datetime | None,
    now: datetime,
) -> list[dict[str, Any]]:
    conditions = list(status.get("conditions") or [])
    generation = sj.generation
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
        completed = _one_off_outcome(spec, owned, status, cursor)
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


def _one_off_outcome(
    spec: Spec, owned: Sequence[JobInfo], status: dict[str, Any], cursor: datetime | None
) -> str | None:
    """Why a one-off is over (RunSucceeded, RunFailed, RunDeadLettered, Skipped, ...), or None
    while it is not (its Job runs, or, with retries, another attempt may come)."""
    assert spec.run_at is not None
    if cursor is None or cursor < spec.run_at:
        return None
    runs = runs_of(job for job in owned if job.slot == spec.run_at)
    outcomes = [run.outcome(spec.retry) for run in runs.values()]
    known = [outcome for outcome in outcomes if outcome is not RunOutcome.SUPERSEDED]
    if known:
        if any(outcome in ONGOING for outcome in known):
            return None
        return f"Run{RESULTS[known[-1]]}"
    recorded = [
        r for r in status.get("recentRuns") or [] if r.get("slot") == format_time(spec.run_at)
    ]
    if recorded and recorded[-1].get("result") in _UNFINISHED:
        return None
    return f"Run{recorded[-1]['result']}" if recorded else "Skipped"


def _next_slot(spec: Spec, cursor: datetime | None, now: datetime) -> datetime | None:
    if spec.run_at is not None:
        processed = cursor is not None and cursor >= spec.run_at
        return None if processed else spec.run_at
    assert spec.schedule is not None
    if spec.jitter_seconds and cursor is not None and cursor < now:
        # Every slot up to now is processed but one that waits for its jitter: it comes next.
        return spec.schedule.next_after(cursor)
    return spec.schedule.next_after(max(now, cursor) if cursor else now)
