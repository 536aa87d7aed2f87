"""What a decision is made of: the ScheduledJob as decide() reads it, and the actions it plans
(runs, deletions, releases, labels, skips, Events, status) for the shell to apply. Plain data,
shared by the core (cronlease.core.decide.reconcile, cronlease.core.decide.requestplan) and the
shell (cronlease.shell.applier).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import KIND, parse_time


class SkipReason(enum.StrEnum):
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    CONCURRENCY_FORBID = "ConcurrencyForbid"
    SUSPENDED = "Suspended"
    # An older missed slot: like CronJob, only the most recent missed slot runs after an outage.
    SUPERSEDED = "Superseded"
    # The slot's Job name is held by a Job the leader did not write (a user's, a tenant's).
    NAME_CONFLICT = "NameConflict"
    # spec.pauseOnFailure paused the ScheduledJob (cronlease.core.decide.pausing).
    PAUSED = "Paused"
    # BufferOne or BufferAll had as many slots waiting as it keeps (cronlease.core.decide.overlap).
    BUFFER_FULL = "BufferFull"
    # An edit set runAt to an instant at or before processedUntil: run or skipped before (a
    # GitOps revert), or passed by the cursor; an instant is processed once in an object's life.
    ALREADY_PROCESSED = "AlreadyProcessed"


# Skips the user asked for (a policy, a suspension) are Normal Events, as CronJob's
# JobAlreadyActive is; the others say something went wrong and are Warnings.
EXPECTED_SKIPS = frozenset(
    {
        SkipReason.CONCURRENCY_FORBID,
        SkipReason.SUSPENDED,
        SkipReason.PAUSED,
        SkipReason.ALREADY_PROCESSED,
    }
)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Which object (a ScheduledJob, or a RunRequest) a deferred write or Event is about, and
    nothing more: a burst holds thousands of those while creations go first, and each must not
    pin a whole object."""

    namespace: str
    name: str
    uid: str
    kind: str = KIND


@dataclass(frozen=True)
class ScheduledJobView:
    """The parts of a ScheduledJob object that decide() reads."""

    name: str
    namespace: str
    uid: str
    generation: int
    created_at: datetime
    spec: dict[str, Any]
    status: dict[str, Any]
    annotations: dict[str, str]

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> ScheduledJobView:
        metadata = obj["metadata"]
        created = parse_time(metadata.get("creationTimestamp"))
        assert created is not None, "an object from the API server has a creationTimestamp"
        return cls(
            name=metadata["name"],
            namespace=metadata["namespace"],
            uid=metadata["uid"],
            generation=int(metadata.get("generation", 0)),
            created_at=created,
            spec=obj.get("spec") or {},
            status=obj.get("status") or {},
            annotations=metadata.get("annotations") or {},
        )

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name, self.uid)


@dataclass(frozen=True)
class RequestTarget:
    """Which target of which RunRequest a run is for."""

    name: str
    uid: str
    index: int


@dataclass(frozen=True)
class PlannedRun:
    job_name: str
    slot: datetime
    trigger: str
    run_now_token: str | None = None
    attempt: int = 1
    run: str = ""  # the run this is an attempt of; the Job's own name for a first attempt
    # spec.retry.maxAttempts when the run began (0: no retries): a run keeps the policy it began
    # under, so turning retries on never retries runs from before.
    max_attempts: int = 0
    request: RequestTarget | None = None  # a RunRequest's run (trigger Replay or Backfill)
    start: datetime | None = None  # when a slot's run is due: the slot plus its jitter

    @property
    def run_name(self) -> str:
        return self.run or self.job_name


class DeletionReason(enum.StrEnum):
    REPLACE = "Replace"
    CANCEL_OTHER = "CancelOther"
    HISTORY_LIMIT = "HistoryLimit"
    DEAD_LETTER_EXPIRED = "DeadLetterExpired"


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True)
class PlannedDeletion:
    job_name: str
    uid: str
    reason: DeletionReason
    kind: str = "Job"  # or "Run" (a multi-step slot's run)


@dataclass(frozen=True)
class PlannedRelease:
    job_name: str
    uid: str
    kind: str = "Job"


@dataclass(frozen=True)
class PlannedLabel:
    """Label a Job `label`=`value`: a dead letter (a run's last attempt, every attempt failed),
    a dead letter replayed, or an attempt that was retried."""

    job_name: str
    uid: str
    label: str
    value: str = "true"
    kind: str = "Job"


@dataclass(frozen=True)
class SkippedSlots:
    reason: SkipReason
    count: int
    latest: datetime


@dataclass(frozen=True)
class EventRecord:
    type: EventType
    reason: str
    message: str
    about: ObjectRef | None = None  # the object the Event is about; None: the ScheduledJob


@dataclass(frozen=True)
class RequestStatus:
    """A RunRequest's new status, written after the ScheduledJob's, conditional on `version`
    (the request's resourceVersion when `previous` was read)."""

    ref: ObjectRef
    version: str
    previous: dict[str, Any]
    status: dict[str, Any]


@dataclass
class Decision:
    runs: list[PlannedRun] = field(default_factory=list)
    # Due runs whose Job exists already: an earlier attempt created it but its status write was
    # lost (a crash, a failover). Not created again; recorded now, so the record meets reality.
    recorded: list[tuple[PlannedRun, JobInfo]] = field(default_factory=list)
    deletions: list[PlannedDeletion] = field(default_factory=list)
    # Jobs whose slot-record finalizer can go: their run is recorded in the persisted status.
    releases: list[PlannedRelease] = field(default_factory=list)
    labels: list[PlannedLabel] = field(default_factory=list)
    # With retries, a run's Jobs stay held until the run ends (releases.plan_releases says when),
    # so the shell must not release what it creates or records as soon as the status says so.
    keep_runs_held: bool = False
    skips: list[SkippedSlots] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    status: dict[str, Any] = field(default_factory=dict)
    requests: list[RequestStatus] = field(default_factory=list)
    wake_at: datetime | None = None
