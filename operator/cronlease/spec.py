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
    )


def _count(raw: dict[str, Any], field: str, default: int | None) -> int | None:
    value = raw.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"spec.{field}: must be a non-negative integer, not {value!r}")
    return value
