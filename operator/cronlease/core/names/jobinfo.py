"""What the core needs to know about one owned Job, read from its API object.

A Job is input someone else can write: a user may edit its annotations, labels and owner
references, and a tenant may create one. Every field is parsed totally (a bad value reads as
missing, never as an exception), and `trusted` says whether the Job carries everything the leader
writes on the Jobs it creates: only such a Job is ever taken as a slot's run.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_MAX_ATTEMPTS,
    ANNOTATION_REQUEST_INDEX,
    ANNOTATION_REQUEST_UID,
    ANNOTATION_RUN_NOW,
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    DEAD_LETTER_REPLAYED,
    FINALIZER_SLOT_RECORD,
    GROUP,
    KIND,
    LABEL_ATTEMPT,
    LABEL_DEAD_LETTER,
    LABEL_REQUEST,
    LABEL_RETRIED,
    LABEL_RUN,
    LABEL_SCHEDULEDJOB,
    REQUEST_TRIGGERS,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    TRIGGERS,
    attempt_job_name,
    parse_time,
)

# The Job controller's reason for a Job failed by a podFailurePolicy FailJob rule: the run's
# own policy says retrying cannot help.
NOT_RETRYABLE = "PodFailurePolicy"


class JobState(enum.StrEnum):
    ACTIVE = "Active"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class JobInfo:
    name: str
    uid: str
    owner_uid: str | None
    slot: datetime | None
    trigger: str
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    state: JobState
    deleting: bool = False
    namespace: str = ""
    trusted: bool = True  # carries what the leader writes: owner, label, leader, token, slot
    held: bool = False  # still carries the slot-record finalizer
    run_now_token: str | None = None
    # The run this Job is an attempt of (the first attempt's name), and which attempt.
    run: str = ""
    attempt: int = 1
    dead_letter: bool = False  # labelled cronlease.io/dead-letter=true
    replayed: bool = False  # labelled cronlease.io/dead-letter=replayed: a request replayed it
    retried: bool = False  # labelled cronlease.io/retried=true: a later attempt was made
    max_attempts: int = 0  # the retry policy its run began under (0: none)
    failure_reason: str = ""  # the Failed condition's reason
    # A RunRequest's run (trigger Replay or Backfill): the request and the target it runs.
    request_name: str = ""
    request_uid: str = ""
    request_index: int = -1
    # "Job", or "Run": a multi-step slot's run is a Run object (cronlease.core.bodies.runobject),
    # which the ScheduledJob's decisions count, record and delete as they do a Job.
    kind: str = "Job"

    @property
    def run_name(self) -> str:
        return self.run or self.name

    @property
    def finished(self) -> bool:
        return self.state is not JobState.ACTIVE

    def decides_as(self, other: JobInfo | None) -> bool:
        """Whether a decision reads this record as it reads `other`: equal, or an active run's
        that differs only in its start. The start is read only once a run has finished (by
        history_time), and finishing changes its state. A Job's start is one of the watch events
        that wake its ScheduledJob, and at a burst that every Job starts, a decision each for
        nothing (decision 0015; design note 105)."""
        if other is None:
            return False
        if self == other:
            return True
        return not self.finished and replace(other, started_at=self.started_at) == self

    @property
    def history_time(self) -> datetime | None:
        """What history cleanup sorts by: completion, falling back to start, then creation."""
        return self.finished_at or self.started_at or self.created_at


# The model keeps a JobInfo per Job for the Job's life, so what Jobs have in common is kept once
# (decisions 0014 and 0015; design notes 103 and 105): the few triggers, the run named as its first
# attempt is, and the namespace and owner's uid interned (sys.intern: one string for all that hold
# it, freed with the last of them), as the model's keys are.
_TRIGGERS = {trigger: trigger for trigger in TRIGGERS}


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: object) -> dict[str, str]:
    """Labels or annotations: only the entries whose keys and values are strings."""
    return {k: v for k, v in _mapping(value).items() if isinstance(k, str) and isinstance(v, str)}


def _items(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _controller(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The controller owner reference, if it is a ScheduledJob's."""
    for ref in _items(metadata.get("ownerReferences")):
        if ref.get("controller") is True:
            version = _text(ref.get("apiVersion"))
            if ref.get("kind") == KIND and version.startswith(f"{GROUP}/"):
                return ref
            return None
    return None


def _token(text: str | None) -> int | None:
    return int(text) if text and text.isascii() and text.isdigit() else None


def job_info(job: dict[str, Any]) -> JobInfo:
    metadata = _mapping(job.get("metadata"))
    status = _mapping(job.get("status"))
    annotations = _strings(metadata.get("annotations"))
    labels = _strings(metadata.get("labels"))
    owner = _controller(metadata)
    owner_uid = sys.intern(_text(owner.get("uid"))) or None if owner else None
    state, finished_at, failure_reason = JobState.ACTIVE, None, ""
    for condition in _items(status.get("conditions")):
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            state = JobState.SUCCEEDED
            finished_at = parse_time(
                status.get("completionTime") or condition.get("lastTransitionTime")
            )
        elif condition.get("type") == "Failed":
            state = JobState.FAILED
            finished_at = parse_time(condition.get("lastTransitionTime"))
            failure_reason = _text(condition.get("reason"))
    slot = parse_time(annotations.get(ANNOTATION_SCHEDULED_AT))
    trigger = annotations.get(ANNOTATION_TRIGGER, TRIGGER_SCHEDULE)
    trigger = _TRIGGERS.get(trigger, trigger)
    run_now_token = annotations.get(ANNOTATION_RUN_NOW)
    name = _text(metadata.get("name"))
    # Jobs from before retries carry no run or attempt: each is its own run's first attempt.
    run = labels.get(LABEL_RUN, name)
    run = name if run == name else run
    attempt = _token(labels.get(LABEL_ATTEMPT, "1"))
    owner_name = _text(owner.get("name")) if owner else ""
    request_uid = annotations.get(ANNOTATION_REQUEST_UID, "")
    request_index = _token(annotations.get(ANNOTATION_REQUEST_INDEX))
    trusted = (
        owner is not None
        and owner_uid is not None
        and labels.get(LABEL_SCHEDULEDJOB) == owner.get("name")
        and bool(annotations.get(ANNOTATION_LEADER))
        and _token(annotations.get(ANNOTATION_FENCING_TOKEN)) is not None
        and slot is not None
        and (
            trigger == TRIGGER_SCHEDULE
            or (trigger == TRIGGER_MANUAL and bool(run_now_token))
            or (trigger in REQUEST_TRIGGERS and bool(request_uid) and request_index is not None)
        )
        and attempt is not None
        and attempt >= 1
        and name == attempt_job_name(owner_name, run, attempt)
    )
    finalizers = metadata.get("finalizers")
    return JobInfo(
        name=name,
        uid=_text(metadata.get("uid")),
        owner_uid=owner_uid,
        slot=slot,
        trigger=trigger,
        created_at=parse_time(metadata.get("creationTimestamp")),
        started_at=parse_time(status.get("startTime")),
        finished_at=finished_at,
        state=state,
        deleting=bool(metadata.get("deletionTimestamp")),
        namespace=sys.intern(_text(metadata.get("namespace"))),
        trusted=trusted,
        held=isinstance(finalizers, list) and FINALIZER_SLOT_RECORD in finalizers,
        run_now_token=run_now_token,
        run=run,
        attempt=attempt or 1,
        dead_letter=labels.get(LABEL_DEAD_LETTER) == "true",
        replayed=labels.get(LABEL_DEAD_LETTER) == DEAD_LETTER_REPLAYED,
        retried=labels.get(LABEL_RETRIED) == "true",
        max_attempts=_token(annotations.get(ANNOTATION_MAX_ATTEMPTS)) or 0,
        failure_reason=failure_reason,
        request_name=labels.get(LABEL_REQUEST, ""),
        request_uid=request_uid,
        request_index=-1 if request_index is None else request_index,
    )
