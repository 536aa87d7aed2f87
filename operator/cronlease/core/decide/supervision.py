"""supervise(): given a Run, its step Jobs, their heartbeats and the time, what to do now.

The supervisor half of Scheduler-Agent-Supervisor (issue 17), a pure function like decide(). A
Run's status is the durable state: per step, a phase and the current attempt, which is that
step's fencing token. Every change of the current attempt (a claim) is a status write
conditional on the Run's resourceVersion, and the step Job of an attempt is created only after
the write that claimed it succeeded: two supervisors can never both claim an attempt, and the
Job's name, a function of (run, step, attempt), makes a repeated creation collide. Only the Job of
the current attempt counts: a stale attempt's result, or its heartbeat (on its own Lease), never
does. A finished step is never started again.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.names.conditions import (
    Summary,
    conditions_in,
    find_condition,
    set_condition,
    summarize_status,
)
from cronlease.core.names.jobinfo import NOT_RETRYABLE, JobState
from cronlease.core.names.naming import format_time, parse_time
from cronlease.core.specs.policies import RetryPolicy, SpecError
from cronlease.core.specs.steps import OnFailure, Step, Steps, steps_of_run

# How long a claimed attempt's Job may take to show in the watch after its creation: far more
# than a watch lags. A cancelled attempt never seen is taken as never created after it.
CREATION_GRACE = timedelta(seconds=30)
# An ended attempt's Job still live this long after it ended (its pods do not terminate: a long
# grace period, someone else's finalizer) escalates; its step still waits for it, never runs
# two attempts at once.
LINGER_BOUND = timedelta(minutes=5)
# A step Job someone else deleted in the background: the job controller ignores a Job being
# deleted, and a foreground deletion can no longer be asked of it, so its pods run on while it
# is in view and, once it is gone, until the garbage collector has deleted them and their grace
# period has passed. This much more covers the collector's own delay.
STOPPING_MARGIN = timedelta(seconds=10)
DEFAULT_GRACE = 30  # a pod's terminationGracePeriodSeconds unless its template says otherwise
# status.recoveryLog keeps this many entries (the newest); each is also an Event.
RECOVERY_LOG = 20
MESSAGE_LIMIT = 256


class StepPhase(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    RETRYING = "Retrying"  # an attempt failed; the next starts after the backoff
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # past its attempts, or not retryable
    CANCELLED = "Cancelled"  # stopped because another step failed
    SKIPPED = "Skipped"  # never started because another step failed


class RunPhase(enum.StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"  # onFailure: Stop
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
    CANCELLED = "Cancelled"  # deleted while it ran, with nothing to compensate


FINISHED_RUN = frozenset(
    {
        RunPhase.SUCCEEDED,
        RunPhase.FAILED,
        RunPhase.COMPENSATED,
        RunPhase.COMPENSATION_FAILED,
        RunPhase.CANCELLED,
    }
)
LIVE_STEP = frozenset({StepPhase.RUNNING, StepPhase.RETRYING})


class Action(enum.StrEnum):
    """What a step Job does: the step's work, or the undoing of it."""

    RUN = "run"
    COMPENSATE = "compensate"


class Escalation(enum.StrEnum):
    RETRIES_EXHAUSTED = "RetriesExhausted"
    NOT_RETRYABLE = "NotRetryable"
    HEARTBEAT_LOST = "HeartbeatLost"
    COMPENSATION_FAILED = "CompensationFailed"
    INVALID_RUN = "InvalidRun"
    ATTEMPT_LINGERING = "AttemptLingering"


HEARTBEAT_LOST = "HeartbeatLost"
JOB_DELETED = "JobDeleted"
NAME_CONFLICT = "NameConflict"
CREATE_REFUSED = "CreateRefused"  # the API server would not create the attempt's Job


@dataclass(frozen=True, slots=True)
class StepJob:
    """A step Job as the model keeps it (cronlease.core.bodies.stepjob reads it from the API
    object)."""

    name: str
    uid: str
    run_uid: str  # its controller owner reference: the Run
    step: str
    action: Action
    attempt: int
    state: JobState
    finished_at: datetime | None = None
    failure_reason: str = ""
    deleting: bool = False
    held: bool = False
    trusted: bool = True
    run: str = ""  # its Run's name (its label)
    # Being deleted in the foreground: it stays in view until its pods are gone.
    foreground: bool = False
    grace: int = DEFAULT_GRACE  # its pods' terminationGracePeriodSeconds

    @property
    def finished(self) -> bool:
        return self.state is not JobState.ACTIVE


@dataclass(frozen=True)
class RunView:
    name: str
    namespace: str
    uid: str
    spec: dict[str, Any]
    status: dict[str, Any]
    deleting: bool = False
    generation: int = 1  # its conditions' observedGeneration (a Run's spec never changes)
    supervised: bool = False  # holds the supervision finalizer (cronlease.core.names.naming)


@dataclass(frozen=True)
class StepJobPlan:
    step: str
    action: Action
    attempt: int
    # The claim: its heartbeat Lease starts renewed then (not part of what the plan is).
    since: datetime | None = field(default=None, compare=False)


@dataclass(frozen=True)
class LogEntry:
    step: str
    attempt: int
    action: str
    reason: str
    message: str
    warning: bool = False


@dataclass
class RunPlan:
    status: dict[str, Any]
    # Jobs of current attempts that do not exist yet: created after the status write.
    creations: list[StepJobPlan] = field(default_factory=list)
    # Running Jobs of abandoned attempts or cancelled steps: deleted in the foreground.
    deletions: list[StepJob] = field(default_factory=list)
    # Jobs whose attempt the persisted status has settled: their finalizer can go.
    releases: list[StepJob] = field(default_factory=list)
    # Running current attempts whose heartbeat Lease is missing (its creation failed, a user
    # deleted it): (the attempt's Job, the timeout, the claim), made again after the write.
    leases: list[tuple[StepJob, int, datetime]] = field(default_factory=list)
    log: list[LogEntry] = field(default_factory=list)
    escalation: Escalation | None = None
    wake_at: datetime | None = None
    # The run is final and none of its step Jobs lives: its supervision finalizer can go, and
    # from then on its ScheduledJob counts it finished.
    release_run: bool = False


# An attempt whose Job the API server refused to create: (step, action, attempt) -> (message,
# invalid: never creatable as it is).
Refusals = Mapping[tuple[str, "Action", int], tuple[str, bool]]


def supervise(
    run: RunView,
    jobs: Sequence[StepJob],
    heartbeats: Mapping[str, datetime | None],
    now: datetime,
    taken: frozenset[tuple[str, Action, int]] = frozenset(),
    refused: Refusals | None = None,
) -> RunPlan:
    """Plan what happens next to `run`. `jobs` are the step Jobs the model holds for it;
    `heartbeats` when each heartbeat Lease was last seen renewed, by Lease (= attempt Job) name;
    `taken` the attempts whose Job name a Job cronlease did not write holds; `refused` the
    attempts whose Job the API server refused to create.

    A Job is the run's if it carries what the leader wrote and names the run in its label, with
    the run as its controller or no controller at all: a user may remove the owner reference
    (the README allows orphaning), and the attempt still runs. A Run deleted while it runs is
    cancelled: its steps stop, its finished steps are compensated (onFailure: Compensate), and
    it goes once it is final and none of its Jobs lives."""
    ours = [job for job in jobs if job.trusted and job.run_uid in (run.uid, "")]
    plan = RunPlan(status=copy.deepcopy(run.status))
    plan.releases = _settled(run, ours)
    try:
        steps = steps_of_run(run.spec)
    except SpecError as error:
        _invalid(plan, str(error), now)
        _end(plan, run, ours, now)
        _summarize(plan.status, run.generation, now)
        return plan
    status = plan.status
    if status.get("phase") not in FINISHED_RUN:
        entries = _entries(status, steps)
        supervisor = _Supervisor(
            steps, entries, ours, heartbeats, now, plan, run.generation, taken, refused or {}
        )
        supervisor.observe()
        supervisor.advance(cancelled=run.deleting)
        status["steps"] = [entries[step.name] for step in steps.steps]
        status.setdefault("startedAt", format_time(now))
        plan.creations = supervisor.missing_jobs()
        plan.deletions = supervisor.outdated_jobs()
    if status.get("phase") in FINISHED_RUN:
        _end(plan, run, ours, now)
    _summarize(status, run.generation, now)
    return plan


# What a Run's phase amounts to for kstatus (cronlease.core.names.conditions): running or
# compensating is work under way; a run that failed (compensated or not) stays so and needs a
# person, as its Escalated condition says; a run deleted while it ran is over with nothing to act
# on.
_SUMMARIES = {
    RunPhase.RUNNING: (Summary.RECONCILING, "the steps are running"),
    RunPhase.COMPENSATING: (Summary.RECONCILING, "compensating the finished steps"),
    RunPhase.SUCCEEDED: (Summary.READY, "every step succeeded"),
    RunPhase.FAILED: (Summary.STALLED, "a step failed"),
    RunPhase.COMPENSATED: (Summary.STALLED, "a step failed; the finished steps were compensated"),
    RunPhase.COMPENSATION_FAILED: (Summary.STALLED, "a compensation failed"),
    RunPhase.CANCELLED: (Summary.ENDED, "the run was deleted while it ran"),
}


def _summarize(status: dict[str, Any], generation: int, now: datetime) -> None:
    """Ready, Reconciling and Stalled from the phase, and the generation they describe."""
    raw = status.get("phase")
    phase = RunPhase(raw) if raw in set(RunPhase) else RunPhase.RUNNING
    summary, message = _SUMMARIES[phase]
    escalated = find_condition(status.get("conditions"), "Escalated")
    if summary is Summary.STALLED and escalated is not None:
        message = str(escalated.get("message") or message)
    summarize_status(status, summary, phase.value, message, generation, now)


def _end(plan: RunPlan, run: RunView, jobs: list[StepJob], now: datetime) -> None:
    """A final run: nothing of it may outlive it. Every live step Job is deleted (in the
    foreground, so that it stays in view until its pods are gone), and once none lives, nor can
    one still appear (a cancelled attempt's creation a moment ago), the run lets go."""
    live = [job for job in jobs if not job.finished]
    plan.deletions = [job for job in live if not job.deleting]
    plan.creations = []
    steps = [raw for raw in plan.status.get("steps") or [] if isinstance(raw, dict)]
    stopping = track_stopping(steps, jobs, now)
    appearing = _appearing_until(plan.status, now)
    waits = [when for when in (appearing, stopping) if when is not None]
    if waits:
        plan.wake_at = min([*waits, *([plan.wake_at] if plan.wake_at else [])])
    plan.release_run = (
        run.supervised and not live and appearing is None and not _still_stopping(steps)
    )


def track_stopping(
    steps: list[dict[str, Any]], jobs: Sequence[StepJob], now: datetime
) -> datetime | None:
    """Record, in the entry of its step (or compensation), each live Job someone else deleted
    in the background; once it is gone, until when its pods may still run; and forget the
    record when that has passed. Kept in the status: a restart must not forget pods that run.
    When the next record passes, if any (a wake-up)."""
    parts = {
        (str(entry.get("name")), action): part
        for entry in steps
        for action, part in _parts(entry)
        if isinstance(part, dict)
    }
    live = {(job.step, job.action, job.attempt) for job in jobs if not job.finished}
    for job in jobs:
        part = parts.get((job.step, job.action))
        if part is not None and job.deleting and not job.foreground and not job.finished:
            part["stopping"] = {"attempt": job.attempt, "grace": max(0, job.grace)}
    wake = None
    for (step, action), part in parts.items():
        record = part.get("stopping")
        if not isinstance(record, dict) or type(record.get("attempt")) is not int:
            part.pop("stopping", None)
            continue
        if (step, action, record["attempt"]) in live:
            continue  # still in view: its Job event wakes the run
        gone_by = parse_time(record.get("podsGoneBy"))
        if gone_by is None:
            grace = record.get("grace")
            grace = grace if type(grace) is int and grace >= 0 else DEFAULT_GRACE
            gone_by = now + timedelta(seconds=grace) + STOPPING_MARGIN
            record["podsGoneBy"] = format_time(gone_by)
        if gone_by <= now:
            del part["stopping"]
            continue
        wake = gone_by if wake is None else min(wake, gone_by)
    return wake


def _may_appear(part: dict[str, Any]) -> bool:
    """An attempt that ended (cancelled, or its heartbeat lost) before its Job was ever seen:
    its creation may have happened a moment before, its watch event not in yet. One the API
    server refused, or whose name another Job holds, was never made. Timed from its
    `finishedAt`: one without a readable one (someone mangled the status) is not waited for,
    or it would be waited for on every pass, for ever."""
    ended = part.get("phase") == StepPhase.CANCELLED or (
        part.get("phase") == StepPhase.FAILED and part.get("reason") == HEARTBEAT_LOST
    )
    return (
        ended
        and not part.get("jobUid")
        and bool(part.get("attempt"))
        and parse_time(part.get("finishedAt")) is not None
    )


def _still_stopping(steps: list[dict[str, Any]]) -> bool:
    return any(
        isinstance(part, dict) and "stopping" in part
        for entry in steps
        for _, part in _parts(entry)
    )


def _appearing_until(status: dict[str, Any], now: datetime) -> datetime | None:
    """Until when an attempt that ended before its Job was seen may still appear in the watch
    (its creation may have happened a moment before it ended); None if none can."""
    latest = None
    for raw in status.get("steps") or []:
        for _, part in _parts(raw) if isinstance(raw, dict) else ():
            if not isinstance(part, dict) or not _may_appear(part):
                continue
            until = (parse_time(part.get("finishedAt")) or now) + CREATION_GRACE
            if until > now and (latest is None or until > latest):
                latest = until
    return latest


class _Supervisor:
    def __init__(
        self,
        steps: Steps,
        entries: dict[str, dict[str, Any]],
        jobs: list[StepJob],
        heartbeats: Mapping[str, datetime | None],
        now: datetime,
        plan: RunPlan,
        generation: int,
        taken: frozenset[tuple[str, Action, int]],
        refused: Refusals,
    ) -> None:
        self.steps, self.entries, self.now, self.plan = steps, entries, now, plan
        self.generation, self.taken, self.refused = generation, taken, refused
        self.heartbeats = heartbeats
        self.jobs = {(job.step, job.action, job.attempt): job for job in jobs}
        self.all_jobs = jobs
        self.status = plan.status

    # Watching the current attempts

    def observe(self) -> None:
        """Take in what the current attempts' Jobs and heartbeats say, and which Jobs someone
        else deleted still have pods that run."""
        stopping = track_stopping(list(self.entries.values()), self.all_jobs, self.now)
        if stopping is not None:
            self._wake(stopping)
        for step in self.steps.steps:
            entry = self.entries[step.name]
            if entry["phase"] == StepPhase.RUNNING:
                self._observe(step, entry, Action.RUN, step.retry, step.heartbeat_seconds)
            compensation = entry.get("compensation")
            if compensation and compensation["phase"] == StepPhase.RUNNING and step.compensate:
                self._observe(step, compensation, Action.COMPENSATE, step.compensate.retry, None)
        self._ignore_stale_results()

    def _observe(
        self,
        step: Step,
        entry: dict[str, Any],
        action: Action,
        retry: RetryPolicy,
        heartbeat: int | None,
    ) -> None:
        attempt = int(entry["attempt"])
        job = self.jobs.get((step.name, action, attempt))
        if (step.name, action, attempt) in self.taken:  # someone else's Job holds its name
            self._failed(step, entry, action, retry, NAME_CONFLICT, True)
            return
        refusal = self.refused.get((step.name, action, attempt))
        if job is None and refusal is not None and not entry.get("jobUid"):
            # Never created (a full ResourceQuota, a webhook, a template the server rejects):
            # a failed attempt, so the step's retry policy bounds it and exhausting it escalates.
            message, invalid = refusal
            self._failed(step, entry, action, retry, CREATE_REFUSED, not invalid, message)
            return
        if job is None:
            if entry.get("jobUid"):  # it existed, and went: this attempt is lost, never redone
                self._failed(step, entry, action, retry, JOB_DELETED, True)
            elif heartbeat is not None:  # claimed, its Job not made yet: the claim's deadline
                self._unseen_heartbeat(step, entry, action, retry, heartbeat)
            return  # else claimed, not created yet (or its creation was lost): missing_jobs()
        entry["jobUid"] = job.uid  # created: from now on, its Job is never made again
        if job.state is JobState.SUCCEEDED:
            entry.update(phase=StepPhase.SUCCEEDED, finishedAt=format_time(self._end(job)))
            entry.pop("reason", None)
            if action is Action.RUN:
                entry["order"] = 1 + max(int(e.get("order", 0)) for e in self.entries.values())
            else:
                self._log(step.name, attempt, "Compensated", "", f"step {step.name} compensated")
            return
        if job.state is JobState.FAILED:
            retryable = job.failure_reason != NOT_RETRYABLE
            self._failed(step, entry, action, retry, job.failure_reason or "Failed", retryable)
            return
        if job.deleting:  # deleted by someone else while it ran: this attempt is lost
            self._failed(step, entry, action, retry, JOB_DELETED, True)
            return
        if heartbeat is None:
            return
        started = parse_time(entry.get("startedAt")) or self.now
        if job.name not in self.heartbeats:
            self.plan.leases.append((job, heartbeat, started))
        renewed = self.heartbeats.get(job.name)
        last = min(max(renewed, started), self.now) if renewed else started
        deadline = last + timedelta(seconds=heartbeat)
        if self.now <= deadline:
            self._wake(deadline)
            return
        # Abandoned while it ran (outdated_jobs() deletes its Job): whatever it reports later is
        # stale (_ignore_stale_results).
        entry["abandoned"] = [*entry.get("abandoned", []), attempt]
        self._failed(
            step,
            entry,
            action,
            retry,
            HEARTBEAT_LOST,
            True,
            f"no heartbeat since {format_time(last)} (timeout {heartbeat} s)",
        )

    def _unseen_heartbeat(
        self, step: Step, entry: dict[str, Any], action: Action, retry: RetryPolicy, seconds: int
    ) -> None:
        """A heartbeat counts from the claim, whether or not the attempt's Job could be made
        (refused again after each restart, creations lost): one not seen by its deadline is
        abandoned, never made late only to be abandoned at once. It may still appear (made a
        moment ago): the next attempt, or a compensation, waits CREATION_GRACE for it."""
        claimed = parse_time(entry.get("startedAt")) or self.now
        deadline = claimed + timedelta(seconds=seconds)
        if self.now <= deadline:
            self._wake(deadline)
            return
        attempt = int(entry["attempt"])
        entry["abandoned"] = [*entry.get("abandoned", []), attempt]
        detail = f"no heartbeat since {format_time(claimed)} (timeout {seconds} s); no Job seen"
        self._failed(step, entry, action, retry, HEARTBEAT_LOST, True, detail)
        if entry["phase"] == StepPhase.RETRYING:
            retry_at = max(parse_time(entry["retryAt"]) or self.now, self.now + CREATION_GRACE)
            entry["retryAt"] = format_time(retry_at)

    def _failed(
        self,
        step: Step,
        entry: dict[str, Any],
        action: Action,
        retry: RetryPolicy,
        reason: str,
        retryable: bool,
        detail: str = "",
    ) -> None:
        attempt = int(entry["attempt"])
        what = "compensation" if action is Action.COMPENSATE else "step"
        message = f"{what} {step.name} attempt {attempt} failed ({reason})" + (
            f": {detail}" if detail else ""
        )
        entry.update(reason=reason, message=message[:MESSAGE_LIMIT])
        if retryable and attempt < retry.max_attempts:
            retry_at = self.now + timedelta(seconds=retry.delay(attempt))
            entry.update(phase=StepPhase.RETRYING, retryAt=format_time(retry_at))
            self._log(step.name, attempt, "WillRestart", reason, message, warning=True)
            return
        entry.update(phase=StepPhase.FAILED, finishedAt=format_time(self.now))
        if not retryable:
            entry["retryable"] = False  # escalated as NotRetryable, whatever the reason
        why = "not retryable" if not retryable else f"after {attempt} attempt(s)"
        self._log(step.name, attempt, "GaveUp", reason, f"{message}; {why}", warning=True)

    def _ignore_stale_results(self) -> None:
        """A result of an attempt that is no longer current never counts: said once."""
        logged = {
            (e.get("step"), e.get("attempt"))
            for e in self.status.get("recoveryLog") or []
            if isinstance(e, dict) and e.get("action") == "IgnoredStaleResult"
        }
        for job in self.all_jobs:
            entry = self.entries.get(job.step)
            if entry is None or job.state is JobState.ACTIVE:
                continue
            if job.action is Action.COMPENSATE or (job.step, job.attempt) in logged:
                continue  # compensation attempts are never abandoned while running
            current = entry
            if job.attempt not in current.get("abandoned", []):
                continue  # its result was counted when it came, while it was current
            self._log(
                job.step,
                job.attempt,
                "IgnoredStaleResult",
                job.state.value,
                f"step {job.step} attempt {job.attempt} ended {job.state.value} after attempt "
                f"{current.get('attempt')} replaced it: not counted",
            )

    # Moving on

    def advance(self, cancelled: bool = False) -> None:
        """Start the next attempts and steps, or fail, compensate and finish the run. A
        `cancelled` run (deleted while it ran) starts nothing new but its compensations."""
        failed = [s for s in self.steps.steps if self.entries[s.name]["phase"] == StepPhase.FAILED]
        phase = self.status.get("phase")
        if failed and phase not in (RunPhase.COMPENSATING, RunPhase.FAILED):
            self._fail_run(failed[0])
        elif cancelled and phase != RunPhase.COMPENSATING:
            self._cancel()
        phase = self.status.get("phase")
        if phase == RunPhase.COMPENSATING:
            for step in self.steps.steps:
                compensation = self.entries[step.name].get("compensation")
                if compensation:
                    self._retry_when_due(step, compensation, Action.COMPENSATE)
            self._compensate()
            return
        if phase in (RunPhase.FAILED, RunPhase.CANCELLED):
            self._finish(RunPhase(phase))
            return
        for step in self.steps.steps:
            self._retry_when_due(step, self.entries[step.name], Action.RUN)
        if all(self.entries[s.name]["phase"] == StepPhase.SUCCEEDED for s in self.steps.steps):
            self._finish(RunPhase.SUCCEEDED)
            return
        self.status["phase"] = RunPhase.RUNNING.value
        for step in self.steps.steps:
            entry = self.entries[step.name]
            ready = all(
                self.entries[other]["phase"] == StepPhase.SUCCEEDED for other in step.depends_on
            )
            if entry["phase"] == StepPhase.PENDING and ready:
                self._claim(step, entry, Action.RUN, 1, "Started", "")

    def _retry_when_due(self, step: Step, entry: dict[str, Any], action: Action) -> None:
        if entry["phase"] != StepPhase.RETRYING:
            return
        due = parse_time(entry.get("retryAt")) or self.now
        if due > self.now:
            self._wake(due)
            return
        if self._lingering(step.name, action, due):
            return  # an earlier attempt's Job still lives: its event wakes the run
        reason = str(entry.get("reason", ""))
        self._claim(step, entry, action, int(entry["attempt"]) + 1, "Restarted", reason)

    def _lingering(self, step: str, action: Action | None, since: datetime) -> bool:
        """Whether a Job of the step's `action` (either, if None), or its pods, still live: a
        new attempt, or a compensation, never starts beside them. Past LINGER_BOUND from
        `since` it escalates."""
        lingering = [
            job.name
            for job in self.all_jobs
            if job.step == step and not job.finished and action in (None, job.action)
        ]
        lingering += [
            f"(the pods of attempt {part['stopping']['attempt']})"
            for kind, part in _parts(self.entries[step])
            if isinstance(part, dict) and "stopping" in part and action in (None, kind)
        ]
        if not lingering:
            return False
        if self.now >= since + LINGER_BOUND and not self._escalated(Escalation.ATTEMPT_LINGERING):
            names = ", ".join(sorted(lingering))
            self._escalate(
                Escalation.ATTEMPT_LINGERING,
                f"step {step} waits for Job {names} to stop; it is still running "
                f"{int((self.now - since).total_seconds())} s after its attempt ended",
            )
        elif self.now < since + LINGER_BOUND:
            self._wake(since + LINGER_BOUND)
        return True

    def _escalated(self, escalation: Escalation) -> bool:
        return any(
            c.get("type") == "Escalated" and c.get("reason") == escalation.value
            for c in self._conditions()
            if isinstance(c, dict)
        )

    def _claim(
        self, step: Step, entry: dict[str, Any], action: Action, attempt: int, log: str, why: str
    ) -> None:
        """Attempt `attempt` becomes the current one (the fence): the status write claims it."""
        entry.update(
            phase=StepPhase.RUNNING.value, attempt=attempt, startedAt=format_time(self.now)
        )
        for stale in ("retryAt", "finishedAt", "message", "reason", "jobUid", "retryable"):
            entry.pop(stale, None)
        if log == "Restarted":
            what = "compensation of" if action is Action.COMPENSATE else "step"
            self._log(
                step.name, attempt, log, why, f"{what} {step.name} restarted as attempt {attempt}"
            )

    def _fail_run(self, failed: Step) -> None:
        entry = self.entries[failed.name]
        reason = str(entry.get("reason", ""))
        escalation = (
            Escalation.HEARTBEAT_LOST
            if reason == HEARTBEAT_LOST
            else Escalation.NOT_RETRYABLE
            if reason == NOT_RETRYABLE or entry.get("retryable") is False
            else Escalation.RETRIES_EXHAUSTED
        )
        self._stop_steps(failed.name, f"step {failed.name} failed")
        compensate = self.steps.on_failure is OnFailure.COMPENSATE
        self.status["phase"] = (RunPhase.COMPENSATING if compensate else RunPhase.FAILED).value
        message = f"step {failed.name} failed ({reason}); " + (
            "compensating the finished steps" if compensate else "onFailure is Stop"
        )
        self._escalate(escalation, message)

    def _cancel(self) -> None:
        """The Run was deleted while it ran (a user, Replace, CancelOther, its ScheduledJob's
        deletion): its steps stop, and what finished is compensated as after a failure, with no
        escalation: someone meant it. Recorded as a Cancelled condition and in the log."""
        self._stop_steps("", "the run was deleted")
        compensate = self.steps.on_failure is OnFailure.COMPENSATE and any(
            self.entries[s.name]["phase"] == StepPhase.SUCCEEDED and s.compensate
            for s in self.steps.steps
        )
        self.status["phase"] = (RunPhase.COMPENSATING if compensate else RunPhase.CANCELLED).value
        message = "the run was deleted while it ran: its steps were stopped" + (
            ", and its finished steps are compensated" if compensate else ""
        )
        set_condition(
            self._conditions(),
            "Cancelled",
            "True",
            "RunDeleted",
            message,
            self.generation,
            self.now,
        )
        self._log("", 0, "Cancelled", "RunDeleted", message, warning=True)

    def _stop_steps(self, cause: str, why: str) -> None:
        """Stop every other step: the pending ones never start, the live ones are cancelled
        (their Jobs deleted: outdated_jobs())."""
        for step in self.steps.steps:
            other = self.entries[step.name]
            if other["phase"] == StepPhase.PENDING:
                other["phase"] = StepPhase.SKIPPED.value
            elif other["phase"] in LIVE_STEP:
                other.update(phase=StepPhase.CANCELLED.value, finishedAt=format_time(self.now))
                self._log(
                    step.name,
                    int(other["attempt"]),
                    "Cancelled",
                    cause,
                    f"step {step.name} stopped: {why}",
                )

    def _compensate(self) -> None:
        """Undo the succeeded steps, newest first, one at a time, once no other step runs."""
        stopped = [
            parse_time(entry.get("finishedAt")) or self.now
            for entry in self.entries.values()
            if entry["phase"] in (StepPhase.CANCELLED, StepPhase.FAILED)
        ]
        if any(
            self._lingering(step.name, Action.RUN, max(stopped, default=self.now))
            for step in self.steps.steps
        ):
            return  # a stopped step's Job is still being deleted (outdated_jobs()): its Job
            # event wakes the run; none is compensated while one of them runs
        for entry in self.entries.values():
            # An attempt that ended before its Job was ever seen may have been created a moment
            # ago (its watch event not in yet): it gets the time to show up, and to be deleted.
            ended = parse_time(entry.get("finishedAt")) or self.now
            if _may_appear(entry) and ended + CREATION_GRACE > self.now:
                self._wake(ended + CREATION_GRACE)
                return
        done = sorted(
            (s for s in self.steps.steps if self.entries[s.name]["phase"] == StepPhase.SUCCEEDED),
            key=lambda s: self._completion(self.entries[s.name]),
            reverse=True,
        )
        for step in done:
            if step.compensate is None:
                continue
            entry = self.entries[step.name]
            compensation = entry.setdefault("compensation", {"phase": StepPhase.PENDING.value})
            phase = compensation["phase"]
            if phase == StepPhase.SUCCEEDED:
                continue
            if phase == StepPhase.FAILED:
                self._escalate(
                    Escalation.COMPENSATION_FAILED,
                    f"the compensation of step {step.name} failed; the run needs a human",
                )
                self._finish(RunPhase.COMPENSATION_FAILED)
                return
            if phase == StepPhase.PENDING:
                compensation["attempt"] = 0
                self._claim(step, compensation, Action.COMPENSATE, 1, "Compensating", "")
                self._log(step.name, 1, "Compensating", "", f"compensating step {step.name}")
            return  # one at a time
        set_condition(
            self._conditions(),
            "Compensated",
            "True",
            "Compensated",
            "every finished step was compensated",
            self.generation,
            self.now,
        )
        self._finish(RunPhase.COMPENSATED)

    def _finish(self, phase: RunPhase) -> None:
        self.status.update(phase=phase.value)
        self.status.setdefault("finishedAt", format_time(self.now))
        succeeded = phase is RunPhase.SUCCEEDED
        set_condition(
            self._conditions(),
            "Succeeded",
            "True" if succeeded else "False",
            phase.value,
            "every step succeeded" if succeeded else f"the run ended {phase.value}",
            self.generation,
            self.now,
        )

    def _escalate(self, escalation: Escalation, message: str) -> None:
        conditions = self._conditions()
        set_condition(
            conditions, "Escalated", "True", escalation.value, message, self.generation, self.now
        )
        self.plan.escalation = escalation
        self._log("", 0, "Escalated", escalation.value, message, warning=True)

    def _conditions(self) -> list[dict[str, Any]]:
        return conditions_in(self.status)

    # What the shell does after the status write

    @staticmethod
    def _completion(entry: dict[str, Any]) -> tuple[datetime, int]:
        """When a step finished (its Job's completion), then the order it was seen in."""
        finished = parse_time(entry.get("finishedAt")) or datetime.min.replace(tzinfo=UTC)
        return finished, int(entry.get("order", 0))

    def outdated_jobs(self) -> list[StepJob]:
        """Running Jobs of no current attempt (abandoned, cancelled, or of a run that failed):
        deleted, in the foreground, on every pass until they are going."""
        current = {
            (name, action): int(part["attempt"])
            for name, entry in self.entries.items()
            for action, part in _parts(entry)
            if isinstance(part, dict) and part.get("phase") == StepPhase.RUNNING
        }
        # One being deleted already is not deleted again: a deletion's propagation cannot be
        # changed once it started (track_stopping() waits for its pods instead).
        return [
            job
            for job in self.all_jobs
            if not job.finished
            and not job.deleting
            and current.get((job.step, job.action)) != job.attempt
        ]

    def missing_jobs(self) -> list[StepJobPlan]:
        """The current attempts whose Job does not exist: created after the status write."""
        missing = []
        for step in self.steps.steps:
            entry = self.entries[step.name]
            for action, current in (
                (Action.RUN, entry),
                (Action.COMPENSATE, entry.get("compensation")),
            ):
                if not current or current.get("phase") != StepPhase.RUNNING:
                    continue
                attempt = int(current["attempt"])
                if (step.name, action, attempt) not in self.jobs and not current.get("jobUid"):
                    since = parse_time(current.get("startedAt")) or self.now
                    missing.append(StepJobPlan(step.name, action, attempt, since))
        return missing

    def _log(
        self, step: str, attempt: int, action: str, reason: str, message: str, warning: bool = False
    ) -> None:
        entry = LogEntry(step, attempt, action, reason, message[:MESSAGE_LIMIT], warning)
        self.plan.log.append(entry)
        log = [e for e in self.status.get("recoveryLog") or [] if isinstance(e, dict)]
        log.append(
            {
                "time": format_time(self.now),
                **({"step": step} if step else {}),
                **({"attempt": attempt} if attempt else {}),
                "action": action,
                **({"reason": reason} if reason else {}),
                "message": entry.message,
            }
        )
        self.status["recoveryLog"] = log[-RECOVERY_LOG:]

    def _wake(self, instant: datetime) -> None:
        wake = self.plan.wake_at
        self.plan.wake_at = instant if wake is None else min(wake, instant)

    def _end(self, job: StepJob) -> datetime:
        return job.finished_at or self.now


def _entries(status: dict[str, Any], steps: Steps) -> dict[str, dict[str, Any]]:
    """status.steps by name, one per step of the snapshot; an entry someone else mangled reads
    as the step not started (its Jobs, named by attempt, still collide)."""
    found = {
        e["name"]: dict(e)
        for e in status.get("steps") or []
        if isinstance(e, dict) and isinstance(e.get("name"), str)
    }
    entries = {}
    for step in steps.steps:
        entry = found.get(step.name) or {}
        if not _readable(entry):
            entry = {"name": step.name, "phase": StepPhase.PENDING.value, "attempt": 0}
        compensation = entry.get("compensation")
        if compensation is not None and not _readable(compensation):
            entry.pop("compensation")
        abandoned = entry.get("abandoned")
        if abandoned is not None and not (
            isinstance(abandoned, list) and all(type(n) is int for n in abandoned)
        ):
            entry["abandoned"] = []
        if type(entry.get("order", 0)) is not int:
            entry["order"] = 0
        entries[step.name] = entry
    return entries


def _readable(entry: object) -> bool:
    """A step's (or a compensation's) entry as the supervisor writes it."""
    if not isinstance(entry, dict):
        return False
    attempt = entry.get("attempt")
    return entry.get("phase") in set(StepPhase) and type(attempt) is int and attempt >= 0


def _settled(run: RunView, jobs: list[StepJob]) -> list[StepJob]:
    """Held Jobs whose attempt the persisted status no longer runs: released (a Job of the
    current attempt stays held, so nobody's deletion can make it vanish unrecorded)."""
    if run.status.get("phase") in FINISHED_RUN:
        return [job for job in jobs if job.held]
    current: dict[tuple[str, Action], tuple[int, bool]] = {}
    for entry in run.status.get("steps") or []:
        if not isinstance(entry, dict):
            continue
        name = entry.get("name")
        for action, part in ((Action.RUN, entry), (Action.COMPENSATE, entry.get("compensation"))):
            if isinstance(part, dict) and isinstance(part.get("attempt"), int):
                current[(str(name), action)] = (
                    part["attempt"],
                    part.get("phase") == StepPhase.RUNNING,
                )
    settled = []
    for job in jobs:
        if not job.held:
            continue
        attempt, running = current.get((job.step, job.action), (0, False))
        if job.attempt < attempt or (job.attempt == attempt and not running):
            settled.append(job)
    return settled


def _parts(entry: dict[str, Any]) -> tuple[tuple[Action, Any], ...]:
    """A step's two kinds of attempts: its own, and its compensation's."""
    return ((Action.RUN, entry), (Action.COMPENSATE, entry.get("compensation")))


def _invalid(plan: RunPlan, message: str, now: datetime) -> None:
    status = plan.status
    if status.get("phase") in FINISHED_RUN:
        return
    status.update(phase=RunPhase.FAILED.value, finishedAt=format_time(now))
    conditions = status.setdefault("conditions", [])
    set_condition(conditions, "Escalated", "True", Escalation.INVALID_RUN.value, message, 0, now)
    plan.escalation = Escalation.INVALID_RUN
    plan.log.append(LogEntry("", 0, "Escalated", Escalation.INVALID_RUN.value, message, True))
