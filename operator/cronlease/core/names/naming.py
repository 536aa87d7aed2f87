"""Names, labels and annotations that tie a Job to its ScheduledJob and slot.

The Job name is a pure function of (ScheduledJob, slot) so that a repeated create after a crash or
failover collides with AlreadyExists instead of making a second Job: the name is the idempotency
key.
"""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime

# The API of the operator's own resources (crds/).
GROUP = "cronlease.io"
VERSION = "v1alpha1"
PLURAL = "scheduledjobs"
KIND = "ScheduledJob"
REQUEST_PLURAL = "runrequests"
REQUEST_KIND = "RunRequest"
RUN_PLURAL = "runs"
RUN_KIND = "Run"

LABEL_SCHEDULEDJOB = f"{GROUP}/scheduledjob"
ANNOTATION_SCHEDULED_AT = f"{GROUP}/scheduled-at"
ANNOTATION_TRIGGER = f"{GROUP}/trigger"
ANNOTATION_RUN_NOW = f"{GROUP}/run-now"
ANNOTATION_RESUME = (
    f"{GROUP}/resume"  # a new value lifts a pause on failure (cronlease.core.decide.pausing)
)
# Set by `kubectl cronlease adopt` on a new ScheduledJob: the slot its predecessor (a CronJob) ran
# last. A new ScheduledJob's cursor starts there instead of at its creation, so no slot between is
# lost; read only at the first decision, and never later than the creation (decision 0005; design
# note 90).
ANNOTATION_START_AFTER = f"{GROUP}/start-after"
ANNOTATION_LEADER = f"{GROUP}/leader"
ANNOTATION_FENCING_TOKEN = f"{GROUP}/fencing-token"
# A run's attempts (issue 15): each attempt is a Job; the run is named by its first attempt.
LABEL_RUN = f"{GROUP}/run"
LABEL_ATTEMPT = f"{GROUP}/attempt"
# The last attempt of a run that exhausted its attempts, kept beyond the history limits.
LABEL_DEAD_LETTER = f"{GROUP}/dead-letter"
# An attempt whose next attempt was created: never retried again, whatever becomes of the later
# attempts (history cleanup, a user's deletion).
LABEL_RETRIED = f"{GROUP}/retried"
# spec.retry.maxAttempts when the run began, on each of its attempts (absent: no retries).
ANNOTATION_MAX_ATTEMPTS = f"{GROUP}/max-attempts"
# Held on a Job from its creation until its slot is recorded in its ScheduledJob's status, so the
# Job cannot vanish (TTL, a user, history cleanup) while nothing durable says the slot ran
# (decision 0009; design note 21).
FINALIZER_SLOT_RECORD = f"{GROUP}/slot-record"
# A multi-step Run holds this until it is final and none of its step Jobs lives: deleted while it
# runs, it stays to cancel (and compensate) its steps, and nothing of it outlives it.
FINALIZER_SUPERVISION = f"{GROUP}/supervision"

TRIGGER_SCHEDULE = "Schedule"
TRIGGER_MANUAL = "Manual"
# Runs a RunRequest asks for (issue 15, item 4): a replay of a run, a backfill of a past slot.
TRIGGER_REPLAY = "Replay"
TRIGGER_BACKFILL = "Backfill"
REQUEST_TRIGGERS = frozenset({TRIGGER_REPLAY, TRIGGER_BACKFILL})
# Every trigger the operator writes: a Job's is trusted only if it is one of them.
TRIGGERS = (TRIGGER_SCHEDULE, TRIGGER_MANUAL, *sorted(REQUEST_TRIGGERS))
# Every Job's trigger as a label too (its annotation predates it), so that a selector finds them.
LABEL_TRIGGER = f"{GROUP}/trigger"
# A request's runs: the RunRequest's name (for selectors), its uid and the target's index (what
# the operator trusts: a RunRequest deleted and created again under the same name is another).
LABEL_REQUEST = f"{GROUP}/request"
ANNOTATION_REQUEST_UID = f"{GROUP}/request-uid"
ANNOTATION_REQUEST_INDEX = f"{GROUP}/request-index"
# The value of cronlease.io/dead-letter once a RunRequest has replayed the run: no longer kept.
DEAD_LETTER_REPLAYED = "replayed"

# CronJob's rule: 63 (a label value, which the Job name becomes) minus an 11-character suffix.
MAX_NAME_LENGTH = 52


def scheduled_job_name(owner: str, slot: datetime, with_seconds: bool) -> str:
    """`<owner>-<minutes since epoch>` like CronJob, or seconds when the schedule has seconds."""
    epoch_seconds = int(slot.timestamp())
    return f"{owner}-{epoch_seconds if with_seconds else epoch_seconds // 60}"


def attempt_job_name(owner: str, run: str, attempt: int) -> str:
    """Attempt 1 is the run's own Job; a retry's name is hashed from the run and the attempt, so
    that a repeated create of one attempt collides, and names stay within 63 characters."""
    if attempt == 1:
        return run
    digest = hashlib.sha256(f"{run}/{attempt}".encode()).hexdigest()[:9]
    return f"{owner}-a{digest}"


def manual_job_name(owner: str, token: str) -> str:
    """A run-now Job's name: stable per token, so the same token can never start two runs."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:9]
    return f"{owner}-m{digest}"


def request_job_name(owner: str, trigger: str, request_uid: str, index: int) -> str:
    """A request run's name, stable per (request, target): a repeated create of one target
    collides, so a target never has two runs, across failovers and lost responses."""
    digest = hashlib.sha256(f"{request_uid}/{index}".encode()).hexdigest()[:9]
    return f"{owner}-{'r' if trigger == TRIGGER_REPLAY else 'b'}{digest}"


# The finest precision the operator stores (format_time): every instant is cut to it when parsed,
# so an instant compares equal to its own stored text (a runAt with microseconds would otherwise
# never be covered by a processedUntil that keeps milliseconds, and would run again).
PRECISION_MICROSECONDS = 1000


def format_time(instant: datetime) -> str:
    """RFC 3339 in UTC with a Z, the form Kubernetes writes; sub-second slots keep milliseconds."""
    instant = normalise(instant)
    text = f"{instant.year:04d}" + instant.strftime("-%m-%dT%H:%M:%S")  # %Y does not pad
    if instant.microsecond:
        return f"{text}.{instant.microsecond // 1000:03d}Z"
    return f"{text}Z"


def micro_time(instant: datetime) -> str:
    """A Lease's MicroTime: RFC 3339 in UTC with microseconds, as the API server writes it."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalise(instant: datetime) -> datetime:
    """`instant` in UTC, cut to the precision the operator stores."""
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // PRECISION_MICROSECONDS * 1000)


def parse_time_strictly(text: str) -> datetime:
    """Parse an RFC 3339 timestamp; ValueError (or OverflowError) if it is not one."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # never the host's zone: a time without an offset is UTC
        parsed = parsed.replace(tzinfo=UTC)
    return normalise(parsed)


def parse_time(text: object) -> datetime | None:
    """Parse a timestamp someone else may have written: None when it is missing or is not an
    RFC 3339 time (a hand-edited annotation or status field), never an exception."""
    if not text or not isinstance(text, str) or len(text) > MAX_TIME_TEXT:
        return None  # the cache below keeps texts: a hostile one must not be kilobytes long
    return _parse_time_shared(text)


def first_cursor(created_at: datetime, annotations: dict[str, str]) -> datetime:
    """A new schedule's cursor: its creation, or the slot a CronJob it took over from ran last
    (cronlease.io/start-after, written by `kubectl cronlease adopt`), so the slots between the
    CronJob's last run and the creation are not lost. Never later than the creation (that would
    postpone slots silently), and an unreadable value is ignored. The slots it makes due are
    caught up under the spec's rules (catchUp, startingDeadlineSeconds), as after an outage; a
    slot the CronJob ran meanwhile has its Job under the same name, so it cannot run twice."""
    start = parse_time(annotations.get(ANNOTATION_START_AFTER))
    return created_at if start is None else min(start, created_at)


# RFC 3339 with nanoseconds and an offset is 35 characters; anything longer is not one.
MAX_TIME_TEXT = 64


# The model keeps several instants per Job, and the Jobs of a burst share their slot and mostly
# their creation and start seconds: one datetime per distinct text (they are immutable) instead
# of one per field per Job (decision 0014; design note 103).
@functools.lru_cache(maxsize=1024)
def _parse_time_shared(text: str) -> datetime | None:
    try:
        return parse_time_strictly(text)
    except (ValueError, OverflowError):
        return None
