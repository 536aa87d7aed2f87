"""`kubectl cronlease adopt`: a CronJob as the equivalent ScheduledJob, and every semantic
difference that applies to that CronJob. Pure: the CronJob object and "now" in, the manifest and
the differences out; a CronJob cronlease would read differently is refused with one line.

The manifest carries no start point (`cronlease.io/start-after`): applied as it is, it starts at
its own creation like any new ScheduledJob, however long after the dry run that printed it. Only
`adopt` itself adds one, at the CronJob's last slot read after it suspended the CronJob, in the
same breath as it creates the object; a point read earlier would be stale by the time a saved
manifest is applied, and the operator would run the slots after it that the CronJob already ran.

The ScheduledJob keeps the CronJob's name on purpose: both name a slot's Job `<name>-<minutes since
the epoch>` (`cronlease.core.names.naming.scheduled_job_name`), so a slot the CronJob runs at the
very moment of the handover and the same slot run by cronlease are one Job name, and the API server
lets only one of them exist (decision 0005; design note 90).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronlease.core.names.naming import (
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    VERSION,
    format_time,
    parse_time,
)
from cronlease.core.schedule.cron import EVERY, Schedule, ScheduleError
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.firing import next_firings

ANNOTATION_ADOPTED_FROM = f"{GROUP}/adopted-from"
# The slot the CronJob ran last, kept for `audit` (the ScheduledJob's slots begin after it) once
# adopt has removed cronlease.io/start-after; the operator never reads it.
ANNOTATION_ADOPTED_AFTER = f"{GROUP}/adopted-after"
# What a CronJob's Job carries: its slot, in the CronJob's zone.
CRONJOB_SCHEDULED_TIMESTAMP = "batch.kubernetes.io/cronjob-scheduled-timestamp"
# Annotations of a CronJob that describe that object, not the work: not carried over.
_NOT_CARRIED = ("kubectl.kubernetes.io/", "deployment.kubernetes.io/")
# CronJob gives up counting missed slots beyond this (TooManyMissedTimes).
CRONJOB_MISSED_LIMIT = 100


@dataclass(frozen=True)
class Adoption:
    manifest: dict[str, Any]
    start_after: datetime
    differences: tuple[str, ...]


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def translate(
    cronjob: dict[str, Any],
    now: datetime,
    assumed_zone: str = "UTC",
    job_slot: datetime | None = None,
) -> Adoption:
    """The ScheduledJob that takes over `cronjob`, and where it starts: after the CronJob's last
    slot, by its status or by `job_slot` (its latest Job's, which may land after the status
    write), whichever is later. `now` is the API server's time: only the differences read it
    (the operator caps the start point at the object's creation, its own clock)."""
    metadata = _mapping(cronjob.get("metadata"))
    spec = _mapping(cronjob.get("spec"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise PluginError("the CronJob has no name")
    where = f"cronjob/{name}"
    if len(name) > MAX_NAME_LENGTH:
        raise PluginError(f"{where}: the name is longer than {MAX_NAME_LENGTH} characters")
    expression = spec.get("schedule")
    if not isinstance(expression, str) or not expression.strip():
        raise PluginError(f"{where}: spec.schedule is missing")
    text = expression.strip()
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        raise PluginError(
            f"{where}: spec.schedule carries a time zone ({text.split()[0]}); move it to "
            "spec.timeZone first (CronJob refuses it since Kubernetes 1.29)"
        )
    if text.lower().startswith(EVERY):
        raise PluginError(
            f"{where}: {text!r} counts from the object's creation, so the ScheduledJob's slots "
            "would not be the CronJob's; write it as a cron expression"
        )
    zone_field = spec.get("timeZone")
    if zone_field is not None and not isinstance(zone_field, str):
        raise PluginError(f"{where}: spec.timeZone is not a string")
    zone = zone_field or assumed_zone
    try:
        schedule = Schedule.parse(text, zone)
    except ScheduleError as error:
        raise PluginError(f"{where}: cronlease reads it differently: spec.{error}") from None
    template = spec.get("jobTemplate")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise PluginError(f"{where}: spec.jobTemplate.spec is missing")
    created = parse_time(metadata.get("creationTimestamp")) or now
    status_last = parse_time(_mapping(cronjob.get("status")).get("lastScheduleTime"))
    last = max((t for t in (status_last, job_slot) if t is not None), default=None)
    start_after = last or created
    manifest = _manifest(cronjob, name, schedule, zone, template)
    differences = _differences(
        spec, schedule, zone_field, start_after, _since(last, status_last), now
    )
    return Adoption(manifest, start_after, tuple(differences))


def _since(last: datetime | None, status_last: datetime | None) -> str:
    """Where the CronJob stopped, and which record says so."""
    if last is None:
        return "its creation (it never ran)"
    if last == status_last:
        return f"lastScheduleTime {format_time(last)}"
    return f"its latest Job's slot {format_time(last)}"


def _manifest(
    cronjob: dict[str, Any],
    name: str,
    schedule: Schedule,
    zone: str,
    template: dict[str, Any],
) -> dict[str, Any]:
    metadata = _mapping(cronjob.get("metadata"))
    spec = _mapping(cronjob.get("spec"))
    annotations = {
        key: value
        for key, value in _mapping(metadata.get("annotations")).items()
        if isinstance(value, str) and not key.startswith(_NOT_CARRIED)
    }
    annotations[ANNOTATION_ADOPTED_FROM] = f"cronjob/{name}"
    new_metadata: dict[str, Any] = {"name": name}
    if isinstance(metadata.get("namespace"), str):
        new_metadata["namespace"] = metadata["namespace"]
    labels = _mapping(metadata.get("labels"))
    if labels:
        new_metadata["labels"] = dict(labels)
    new_metadata["annotations"] = annotations
    job_template: dict[str, Any] = {"spec": copy.deepcopy(template["spec"])}
    template_metadata = {
        key: value
        for key, value in _mapping(template.get("metadata")).items()
        if key in ("labels", "annotations") and value
    }
    if template_metadata:
        job_template["metadata"] = copy.deepcopy(template_metadata)
    new_spec: dict[str, Any] = {"schedule": schedule.expression, "timeZone": zone}
    for field in (
        "startingDeadlineSeconds",
        "concurrencyPolicy",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ):
        if spec.get(field) is not None:
            new_spec[field] = spec[field]
    if spec.get("suspend") is True:
        new_spec["suspend"] = True
    new_spec["jobTemplate"] = job_template
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": new_metadata,
        "spec": new_spec,
    }


def _differences(
    spec: dict[str, Any],
    schedule: Schedule,
    zone_field: str | None,
    start_after: datetime,
    since: str,
    now: datetime,
) -> list[str]:
    found: list[str] = []
    if not zone_field:
        found.append(
            "time zone: spec.timeZone is unset, so CronJob evaluates the schedule in "
            "kube-controller-manager's local zone; the ScheduledJob says "
            f"{schedule.time_zone} explicitly (use --time-zone if the controller's zone differs)"
        )
    dst = _dst_example(schedule, now)
    if dst:
        found.append(
            f"DST: {schedule.time_zone} changes its clocks and this schedule fires in the hour "
            f"that changes ({dst}): CronJob fires a repeated wall time twice and skips the times "
            "a spring-forward removes; cronlease fires each wall-clock time exactly once"
        )
    deadline = spec.get("startingDeadlineSeconds")
    if deadline == 0:
        found.append(
            "deadline 0: this CronJob never runs (its controller always wakes ~100 ms late); "
            "the ScheduledJob runs every on-time slot (1 s tolerance): runs will start again"
        )
    policy = spec.get("concurrencyPolicy") or "Allow"
    if policy == "Forbid":
        found.append(
            "Forbid racing: CronJob decides Forbid on its status, which lags (overlaps and "
            "pile-ups, kubernetes#58748); cronlease decides on its live watch of the Jobs. The "
            "CronJob's own Jobs are not cronlease's: adopt waits for them to end first"
        )
    elif policy == "Replace":
        found.append(
            "Replace: cronlease replaces only its own runs, so adopt waits for the CronJob's "
            "running Jobs to end before it hands over"
        )
    found.append(_missed(spec, schedule, start_after, since, now))
    found.append(
        "Job names stay <name>-<minutes since the epoch>: a slot the CronJob ran at the "
        "handover keeps its Job, and cronlease records that slot as NameConflict (a Warning "
        "Event) instead of running it twice"
    )
    found.append(
        f"annotations: cronlease's Jobs carry {GROUP}/scheduled-at (UTC), not "
        f"{CRONJOB_SCHEDULED_TIMESTAMP}; pods see CRONLEASE_SCHEDULED_AT"
    )
    found.append(
        "manual runs: `kubectl create job --from=cronjob/...` is invisible to CronJob; "
        "`kubectl cronlease run-now` is counted for concurrency and history"
    )
    found.append(
        "the CronJob stays, suspended, with its Jobs: deleting it deletes them unless "
        "`kubectl delete cronjob NAME --cascade=orphan`"
    )
    return found


def _missed(
    spec: dict[str, Any],
    schedule: Schedule,
    start_after: datetime,
    since: str,
    now: datetime,
) -> str:
    if spec.get("suspend") is True:
        return (
            f"suspended: the ScheduledJob is created suspended, its cursor at {since}; slots "
            "while suspended are counted as Suspended, none runs late"
        )
    missed = schedule.count_between(start_after, now)
    if not missed:
        return f"missed slots: none since {since}: the ScheduledJob starts from there"
    latest = schedule.slots_between(start_after, now, limit=1)[-1]
    cronjob = (
        f"CronJob would start only the latest (and beyond {CRONJOB_MISSED_LIMIT} missed, "
        "only warn TooManyMissedTimes), from an estimate that irregular schedules get wrong"
    )
    return (
        f"missed slots: {missed} since {since}, the latest {format_time(latest)}: {cronjob}; "
        "cronlease counts them exactly and catches up under catchUp and "
        "startingDeadlineSeconds (by default the latest runs, the rest are Superseded)"
    )


def _dst_example(schedule: Schedule, now: datetime) -> str:
    """A slot within the coming year that the DST rule moves or keeps once, as text; "" if none.
    CronJob schedules fire at most once a minute: 200 firings cover the two hours around a
    change."""
    zone = ZoneInfo(schedule.time_zone)
    start = now
    for _ in range(366):
        end = start + _DAY
        if _offset(start, zone) != _offset(end, zone):
            change = _change(start, end, zone)
            for firing in next_firings(schedule, change - _HOUR - _HOUR, 200):
                if firing.slot > change + _HOUR:
                    break
                if firing.note:
                    local = firing.local.strftime("%Y-%m-%d %H:%M %Z")
                    return f"{local}: {firing.note}"
        start = end
    return ""


_DAY, _HOUR, _SECOND = timedelta(days=1), timedelta(hours=1), timedelta(seconds=1)


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta | None:
    return instant.astimezone(zone).utcoffset()


def _change(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first instant of (low, high] whose offset differs from low's, to the second."""
    before = _offset(low, zone)
    while high - low > _SECOND:
        middle = low + (high - low) / 2
        if _offset(middle, zone) == before:
            low = middle
        else:
            high = middle
    return high
