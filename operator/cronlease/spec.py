"""The ScheduledJob spec as the core sees it, parsed and checked once.

The CRD's schema and CEL rules reject most bad input at `kubectl apply`; this module re-checks
everything, because objects can predate a CRD upgrade and some checks (a cron that never fires)
are beyond CEL. A spec that fails here becomes the InvalidSpec condition, never an exception.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cronlease.cron import Schedule, ScheduleError
from cronlease.naming import MAX_NAME_LENGTH, format_time, parse_time_strictly

RUN_AT_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_LATEST = datetime(2286, 11, 20, 17, 46, 39, tzinfo=UTC)


class ConcurrencyPolicy(enum.StrEnum):
    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"


# Bounds of spec.retry and spec.deadLetter; the CRD's schema says the same at apply.
MAX_ATTEMPTS = 10
MAX_BACKOFF_SECONDS = 86_400
MAX_FACTOR = 10.0
MAX_RETENTION_SECONDS = 31_536_000
DEFAULT_RETENTION_SECONDS = 7 * 86_400


@dataclass(frozen=True)
class RetryPolicy:
    """spec.retry: attempts beyond the Job's own pod retries, with a growing delay between."""

    max_attempts: int = 1
    initial_seconds: float = 10.0
    factor: float = 2.0
    max_seconds: float = 3600.0
    # How long a dead letter (a run's last attempt, all attempts failed) is kept.
    dead_letter_retention_seconds: int = DEFAULT_RETENTION_SECONDS

    def delay(self, failed_attempt: int) -> float:
        """Seconds between the end of `failed_attempt` and the start of the next one."""
        exponent = min(failed_attempt - 1, 64)  # far beyond any max; no float overflow
        return min(self.max_seconds, self.initial_seconds * self.factor**exponent)


class SpecError(ValueError):
    """A spec the operator cannot act on; the message names the field."""


@dataclass(frozen=True)
class Spec:
    schedule: Schedule | None
    run_at: datetime | None
    starting_deadline_seconds: int | None
    concurrency_policy: ConcurrencyPolicy
    suspend: bool
    successful_jobs_history_limit: int
    failed_jobs_history_limit: int
    job_template: dict[str, Any]
    # None: no retries and no dead letters (a failed run is history, as with CronJob).
    retry: RetryPolicy | None = None

    @property
    def trigger_key(self) -> str:
        """Identifies what slots mean: a change of it is a schedule edit."""
        if self.schedule is not None:
            return f"schedule={self.schedule.expression};timeZone={self.schedule.time_zone}"
        assert self.run_at is not None
        return f"runAt={self.run_at.isoformat()}"


def parse_spec(name: str, raw: dict[str, Any]) -> Spec:
    """Parse and check a spec; raise SpecError naming the first bad field."""
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"metadata.name: must be no more than {MAX_NAME_LENGTH} characters")
    expression, run_at_text = raw.get("schedule"), raw.get("runAt")
    if (expression is None) == (run_at_text is None):
        raise SpecError("spec: set exactly one of schedule and runAt")
    schedule = run_at = None
    if expression is not None:
        try:
            schedule = Schedule.parse(str(expression), str(raw.get("timeZone") or "UTC"))
        except ScheduleError as error:
            raise SpecError(f"spec.{error}") from None
    else:
        if not run_at_text:
            raise SpecError("spec.runAt: must not be empty")
        try:
            run_at = parse_time_strictly(str(run_at_text))
        except (ValueError, OverflowError):
            raise SpecError(f"spec.runAt: not an RFC 3339 time: {run_at_text!r}") from None
        if not RUN_AT_EARLIEST <= run_at <= RUN_AT_LATEST:
            # Job names carry epoch seconds, 10 digits in this range (names stay <= 63).
            raise SpecError(
                f"spec.runAt: must be between {format_time(RUN_AT_EARLIEST)} and "
                f"{format_time(RUN_AT_LATEST)}"
            )
    try:
        policy = ConcurrencyPolicy(raw.get("concurrencyPolicy", "Allow"))
    except ValueError:
        given = raw.get("concurrencyPolicy")
        raise SpecError(
            f"spec.concurrencyPolicy: must be Allow, Forbid or Replace, not {given!r}"
        ) from None
    template = raw.get("jobTemplate")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise SpecError("spec.jobTemplate.spec: required")
    if "selector" in template["spec"]:
        raise SpecError("spec.jobTemplate.spec.selector: must not be set")
    return Spec(
        schedule=schedule,
        run_at=run_at,
        starting_deadline_seconds=_count(raw, "startingDeadlineSeconds", None),
        concurrency_policy=policy,
        suspend=bool(raw.get("suspend", False)),
        successful_jobs_history_limit=_count(raw, "successfulJobsHistoryLimit", 3) or 0,
        failed_jobs_history_limit=_count(raw, "failedJobsHistoryLimit", 1) or 0,
        job_template=template,
        retry=_retry(raw),
    )


def _retry(raw: dict[str, Any]) -> RetryPolicy | None:
    retry, dead_letter = raw.get("retry"), raw.get("deadLetter")
    if retry is None and dead_letter is None:
        return None
    retry = _section(retry, "retry")
    backoff = _section(retry.get("backoff"), "retry.backoff")
    dead_letter = _section(dead_letter, "deadLetter")
    default = RetryPolicy()
    return RetryPolicy(
        max_attempts=int(
            _bounded(retry, "retry.maxAttempts", default.max_attempts, 1, MAX_ATTEMPTS)
        ),
        initial_seconds=_bounded(
            backoff, "retry.backoff.initialSeconds", default.initial_seconds, 0, MAX_BACKOFF_SECONDS
        ),
        factor=_bounded(backoff, "retry.backoff.factor", default.factor, 1, MAX_FACTOR),
        max_seconds=_bounded(
            backoff, "retry.backoff.maxSeconds", default.max_seconds, 0, MAX_BACKOFF_SECONDS
        ),
        dead_letter_retention_seconds=int(
            _bounded(
                dead_letter,
                "deadLetter.retentionSeconds",
                default.dead_letter_retention_seconds,
                0,
                MAX_RETENTION_SECONDS,
            )
        ),
    )


def _section(value: object, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SpecError(f"spec.{field}: must be an object, not {value!r}")
    return value


def _bounded(section: dict[str, Any], field: str, default: float, low: float, high: float) -> float:
    """A number in [low, high]; whole numbers only where the default is whole."""
    value = section.get(field.rsplit(".", 1)[-1], default)
    whole = isinstance(default, int)
    valid_type = isinstance(value, int) if whole else isinstance(value, int | float)
    if isinstance(value, bool) or not valid_type or not low <= value <= high:
        kind = "an integer" if whole else "a number"
        raise SpecError(f"spec.{field}: must be {kind} from {low:g} to {high:g}, not {value!r}")
    return float(value) if not whole else value


def _count(raw: dict[str, Any], field: str, default: int | None) -> int | None:
    value = raw.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"spec.{field}: must be a non-negative integer, not {value!r}")
    return value
