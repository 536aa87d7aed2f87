"""Names, labels and annotations that tie a Job to its ScheduledJob and slot.

The Job name is a pure function of (ScheduledJob, slot) so that a repeated create after a crash or
failover collides with AlreadyExists instead of making a second Job: the name is the idempotency
key.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from cronlease import GROUP

LABEL_SCHEDULEDJOB = f"{GROUP}/scheduledjob"
ANNOTATION_SCHEDULED_AT = f"{GROUP}/scheduled-at"
ANNOTATION_TRIGGER = f"{GROUP}/trigger"
ANNOTATION_RUN_NOW = f"{GROUP}/run-now"
ANNOTATION_LEADER = f"{GROUP}/leader"
ANNOTATION_FENCING_TOKEN = f"{GROUP}/fencing-token"

TRIGGER_SCHEDULE = "Schedule"
TRIGGER_MANUAL = "Manual"

# CronJob's rule: 63 (a label value, which the Job name becomes) minus an 11-character suffix.
MAX_NAME_LENGTH = 52


def scheduled_job_name(owner: str, slot: datetime, with_seconds: bool) -> str:
    """`<owner>-<minutes since epoch>` like CronJob, or seconds when the schedule has seconds."""
    epoch_seconds = int(slot.timestamp())
    return f"{owner}-{epoch_seconds if with_seconds else epoch_seconds // 60}"


def manual_job_name(owner: str, token: str) -> str:
    """A run-now Job's name: stable per token, so the same token can never start two runs."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:9]
    return f"{owner}-m{digest}"


def format_time(instant: datetime) -> str:
    """RFC 3339 in UTC with a Z, the form Kubernetes writes; sub-second slots keep milliseconds."""
    instant = instant.astimezone(UTC)
    text = f"{instant.year:04d}" + instant.strftime("-%m-%dT%H:%M:%S")  # %Y does not pad
    if instant.microsecond:
        return f"{text}.{instant.microsecond // 1000:03d}Z"
    return f"{text}Z"


def parse_time(text: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp as Kubernetes writes it; None for a missing value."""
    if not text:
        return None
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # never the host's zone: a time without an offset is UTC
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)
