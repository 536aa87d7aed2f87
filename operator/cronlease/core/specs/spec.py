"""The ScheduledJob spec as the core sees it, parsed and checked once.

The CRD's schema and CEL rules reject most bad input at `kubectl apply`; this module re-checks
everything, because objects can predate a CRD upgrade and some checks (a cron that never fires)
are beyond CEL. A spec that fails here becomes the InvalidSpec condition, never an exception.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from cronlease.core.names.naming import MAX_NAME_LENGTH, format_time, parse_time_strictly
from cronlease.core.schedule.cron import Schedule, ScheduleError
from cronlease.core.schedule.schedules import ScheduleSet
from cronlease.core.specs.policies import (
    DEFAULT_BUFFER,
    MAX_ATTEMPTS,
    MAX_BACKOFF_SECONDS,
    MAX_BUFFER,
    MAX_CONSECUTIVE_FAILURES,
    MAX_FACTOR,
    MAX_JITTER_SECONDS,
    MAX_PRIORITY,
    MAX_RETENTION_SECONDS,
    RetryPolicy,
    SpecError,
)
from cronlease.core.specs.steps import Steps, parse_steps

RUN_AT_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
RUN_AT_LATEST = datetime(2286, 11, 20, 17, 46, 39, tzinfo=UTC)


class ConcurrencyPolicy(enum.StrEnum):
    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"  # Temporal's TerminateOther: the old run is deleted, the new starts at once
    BUFFER_ONE = "BufferOne"
    BUFFER_ALL = "BufferAll"
    CANCEL_OTHER = "CancelOther"  # the old run is deleted, the new starts once it is gone


# The policies under which a slot due while a run is active waits in status.buffered.
BUFFERING = frozenset(
    {ConcurrencyPolicy.BUFFER_ONE, ConcurrencyPolicy.BUFFER_ALL, ConcurrencyPolicy.CANCEL_OTHER}
)


class CatchUp(enum.StrEnum):
    """Which of several timely slots due at once run (after an outage, a suspension's end...)."""

    LATEST = "Latest"
    ALL = "All"


Choice = TypeVar("Choice", bound=enum.StrEnum)


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
    # Each slot's run starts up to this many seconds late (cronlease.core.schedule.jitter); runAt
    # ignores it.
    jitter_seconds: int = 0
    # spec.pauseOnFailure.consecutiveFailures (cronlease.core.decide.pausing); 0 when unset.
    pause_on_failure: int = 0
    # None: CronJob's rule, but all timely slots under Allow with a deadline (as before 16).
    catch_up: CatchUp | None = None
    buffer_limit: int = DEFAULT_BUFFER  # slots BufferAll keeps waiting, at most
    # When many ScheduledJobs are due at once, higher ones create their Jobs first (the
    # scheduler reads it from the object: see priority_of).
    priority: int = 0
    # spec.steps (issue 17): each slot runs as a multi-step Run instead of a Job.
    steps: Steps | None = None

    @property
    def catches_up_all(self) -> bool:
        if self.catch_up is not None:
            return self.catch_up is CatchUp.ALL
        allow = self.concurrency_policy is ConcurrencyPolicy.ALLOW
        return allow and self.starting_deadline_seconds is not None

    @property
    def trigger_key(self) -> str:
        """Identifies what slots mean: a change of it is a schedule edit."""
        if self.schedule is not None:
            return f"schedule={self.schedule.expression};timeZone={self.schedule.time_zone}"
        assert self.run_at is not None
        return f"runAt={self.run_at.isoformat()}"


def parse_spec(name: str, raw: dict[str, Any], created: datetime | None = None) -> Spec:
    """Parse and check a spec; raise SpecError naming the first bad field. `created` is the
    ScheduledJob's creation, where "@every" counts its periods from."""
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"metadata.name: must be no more than {MAX_NAME_LENGTH} characters")
    expression, several, run_at_text = raw.get("schedule"), raw.get("schedules"), raw.get("runAt")
    if sum(value is not None for value in (expression, several, run_at_text)) != 1:
        raise SpecError("spec: set exactly one of schedule, schedules and runAt")
    schedule = run_at = None
    zone = str(raw.get("timeZone") or "UTC")
    if expression is not None or several is not None:
        try:
            if several is not None:
                if not isinstance(several, list) or not all(isinstance(e, str) for e in several):
                    raise ScheduleError("schedules: must be a list of cron expressions")
                schedule = ScheduleSet.parse_all(several, zone, created)
            else:
                schedule = Schedule.parse(str(expression), zone, created)
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
    policy = _choice(raw, "concurrencyPolicy", ConcurrencyPolicy) or ConcurrencyPolicy.ALLOW
    catch_up = _choice(raw, "catchUp", CatchUp)
    template = raw.get("jobTemplate")
    steps = steps_of(raw)
    if steps is not None:
        template = {}
    elif not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise SpecError("spec.jobTemplate.spec: required")
    elif "selector" in template["spec"]:
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
        retry=_retry(raw) if steps is None else None,
        jitter_seconds=_jitter(raw, schedule),
        pause_on_failure=_pause_on_failure(raw),
        catch_up=catch_up,
        buffer_limit=int(_bounded(raw, "bufferLimit", DEFAULT_BUFFER, 1, MAX_BUFFER)),
        priority=int(_bounded(raw, "priority", 0, -MAX_PRIORITY, MAX_PRIORITY)),
        steps=steps,
    )


def steps_of(raw: dict[str, Any]) -> Steps | None:
    """spec.steps, the alternative to jobTemplate; spec.retry is then each step's default."""
    if raw.get("steps") is None:
        if raw.get("onFailure") is not None:
            raise SpecError("spec.onFailure: only with spec.steps")
        return None
    if raw.get("jobTemplate") is not None:
        raise SpecError("spec: set exactly one of jobTemplate and steps")
    if raw.get("deadLetter") is not None:
        raise SpecError("spec.deadLetter: not with steps (a failed run is escalated)")
    return parse_steps(raw, _retry(raw))


def priority_of(raw: dict[str, Any]) -> int:
    """spec.priority of a ScheduledJob's spec, for ordering a burst: 0 unless a valid integer
    (an invalid one makes the object InvalidSpec anyway; it must not disturb the others)."""
    value = raw.get("priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(-MAX_PRIORITY, min(MAX_PRIORITY, value))


def _choice(raw: dict[str, Any], field: str, kind: type[Choice]) -> Choice | None:
    """One of an enum's values, None if unset (the CRD's enum says the same at apply)."""
    value = raw.get(field)
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        names = [member.value for member in kind]
        allowed = ", ".join(names[:-1]) + f" or {names[-1]}"
        raise SpecError(f"spec.{field}: must be {allowed}, not {value!r}") from None


def _pause_on_failure(raw: dict[str, Any]) -> int:
    if raw.get("pauseOnFailure") is None:
        return 0
    section = _section(raw["pauseOnFailure"], "pauseOnFailure")
    field = "pauseOnFailure.consecutiveFailures"
    return int(_bounded(section, field, 0, 1, MAX_CONSECUTIVE_FAILURES))


def _jitter(raw: dict[str, Any], schedule: Schedule | None) -> int:
    """spec.jitterSeconds, below the schedule's shortest gap between slots (so the runs keep the
    slots' order); the CRD checks the range, only the operator knows the gap."""
    jitter = int(_bounded(raw, "jitterSeconds", 0, 0, MAX_JITTER_SECONDS))
    if schedule is not None and jitter:
        gap = int(schedule.shortest_gap.total_seconds())
        if jitter >= gap:
            raise SpecError(
                f"spec.jitterSeconds: must be below the shortest gap between two slots of the "
                f"schedule ({gap} s), not {jitter}"
            )
    return jitter


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
        low_text, high_text = (
            str(int(b)) if float(b).is_integer() else f"{b:g}" for b in (low, high)
        )
        raise SpecError(
            f"spec.{field}: must be {kind} from {low_text} to {high_text}, not {value!r}"
        )
    return float(value) if not whole else value


def _count(raw: dict[str, Any], field: str, default: int | None) -> int | None:
    value = raw.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"spec.{field}: must be a non-negative integer, not {value!r}")
    return value
