"""What the core needs to know about one owned Job, read from its API object."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronlease.naming import (
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    TRIGGER_SCHEDULE,
    parse_time,
)


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

    @property
    def finished(self) -> bool:
        return self.state is not JobState.ACTIVE

    @property
    def history_time(self) -> datetime | None:
        """What history cleanup sorts by: completion, falling back to start, then creation."""
        return self.finished_at or self.started_at or self.created_at


def job_info(job: dict[str, Any]) -> JobInfo:
    metadata = job.get("metadata", {})
    status = job.get("status") or {}
    annotations = metadata.get("annotations") or {}
    owner_uid = next(
        (ref.get("uid") for ref in metadata.get("ownerReferences") or [] if ref.get("controller")),
        None,
    )
    state, finished_at = JobState.ACTIVE, None
    for condition in status.get("conditions") or []:
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
    return JobInfo(
        name=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        owner_uid=owner_uid,
        slot=parse_time(annotations.get(ANNOTATION_SCHEDULED_AT)),
        trigger=annotations.get(ANNOTATION_TRIGGER, TRIGGER_SCHEDULE),
        created_at=parse_time(metadata.get("creationTimestamp")),
        started_at=parse_time(status.get("startTime")),
        finished_at=finished_at,
        state=state,
        deleting=bool(metadata.get("deletionTimestamp")),
    )
