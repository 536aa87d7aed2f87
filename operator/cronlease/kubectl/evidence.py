"""What the API objects say about a ScheduledJob's slots, as the ledger's `Facts`. Pure: the
ScheduledJob, the Jobs of its namespace, its Events and "now" in. Every field is read totally, as
the operator reads them (`cronlease.core.names.jobinfo.job_info`,
`cronlease.core.names.naming.parse_time`): an object someone edited by hand yields less evidence,
never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cronlease.core.names.jobinfo import job_info
from cronlease.core.names.naming import (
    KIND,
    REQUEST_TRIGGERS,
    TRIGGER_SCHEDULE,
    first_cursor,
    format_time,
    parse_time,
)
from cronlease.core.schedule.cron import Schedule
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import Spec, parse_spec
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.ledger import Facts, RunRecord, SkipRecord
from cronlease.kubectl.translate import (
    ANNOTATION_ADOPTED_AFTER,
    ANNOTATION_ADOPTED_FROM,
    CRONJOB_SCHEDULED_TIMESTAMP,
)

# Slots the ledger enumerates at most: beyond, the window alone is judged (and counts are a
# weaker check, see cronlease.kubectl.ledger).
MAX_SLOTS = 20_000
_LATEST = re.compile(r"latest (\S+)$")
_EDITED = re.compile(r"slots before (\S+) will not run")
_CRONJOB_SUFFIX = re.compile(r"-(\d{1,12})$")


@dataclass(frozen=True)
class Subject:
    """A ScheduledJob as the plugin needs it."""

    name: str
    namespace: str
    uid: str
    created: datetime
    spec: Spec
    raw: dict[str, Any]

    @property
    def status(self) -> dict[str, Any]:
        status = self.raw.get("status")
        return status if isinstance(status, dict) else {}

    @property
    def annotations(self) -> dict[str, str]:
        metadata = self.raw.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        if not isinstance(annotations, dict):
            return {}
        return {k: v for k, v in annotations.items() if isinstance(v, str)}


def subject_of(obj: dict[str, Any]) -> Subject:
    """The ScheduledJob `obj`, or a PluginError naming what the operator would call invalid."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    name = str(metadata.get("name", ""))
    created = parse_time(metadata.get("creationTimestamp"))
    if created is None:
        raise PluginError(f"scheduledjob/{name}: no creationTimestamp")
    raw_spec = obj.get("spec")
    try:
        spec = parse_spec(name, raw_spec if isinstance(raw_spec, dict) else {}, created)
    except SpecError as error:
        raise PluginError(f"scheduledjob/{name}: invalid: {error}") from None
    return Subject(
        name, str(metadata.get("namespace", "")), str(metadata.get("uid", "")), created, spec, obj
    )


def window_slots(
    schedule: Schedule | None,
    run_at: datetime | None,
    low: datetime,
    high: datetime,
    start: datetime | None,
) -> list[datetime]:
    """The slots in [low, high], and those since `start` too when there are few enough, so that
    the counters are matched against the ScheduledJob's whole life."""
    if schedule is None:
        return [run_at] if run_at is not None and low <= run_at <= high else []
    since = low - timedelta(microseconds=1)
    if start is not None and start < since and schedule.count_between(start, high) <= MAX_SLOTS:
        since = start
    if schedule.count_between(since, high) > MAX_SLOTS:
        raise PluginError(f"the window holds more than {MAX_SLOTS} slots: narrow --from/--to")
    return schedule.slots_between(since, high, limit=MAX_SLOTS)


def start_of(subject: Subject, events: Sequence[dict[str, Any]]) -> datetime:
    """Where the ScheduledJob's own slots begin: its first cursor (its creation, or where the
    CronJob it took over stopped), or the latest schedule edit, whose slots before never run."""
    start = first_cursor(subject.created, subject.annotations)
    adopted = parse_time(subject.annotations.get(ANNOTATION_ADOPTED_AFTER))
    if adopted is not None:  # its start-after, removed once the operator had read it
        start = min(start, adopted)
    for event in _events_of(subject, events):
        if event.get("reason") == "ScheduleChanged":
            match = _EDITED.search(str(event.get("message", "")))
            edited = parse_time(match.group(1)) if match else None
            if edited is not None:
                start = max(start, edited)
    return start


def gather(
    subject: Subject,
    jobs: Sequence[dict[str, Any]],
    events: Sequence[dict[str, Any]],
    low: datetime,
    high: datetime,
    now: datetime,
) -> Facts:
    status = subject.status
    start = start_of(subject, events)
    slots = window_slots(subject.spec.schedule, subject.spec.run_at, low, high, start)
    runs, visible = _runs(subject, jobs)
    skips = [
        SkipRecord(str(event["reason"]).removeprefix("Skipped"), latest)
        for event in _events_of(subject, events)
        if str(event.get("reason", "")).startswith("Skipped")
        and (latest := _latest(event)) is not None
    ]
    counts = status.get("slotsSkipped")
    skipped = {
        str(reason): count
        for reason, count in (counts.items() if isinstance(counts, dict) else [])
        if isinstance(count, int) and not isinstance(count, bool)
    }
    created = status.get("runsCreated")
    runs_created = created if isinstance(created, int) and not isinstance(created, bool) else 0
    buffered = status.get("buffered")
    waiting = frozenset(
        t for t in (parse_time(b) for b in (buffered if isinstance(buffered, list) else [])) if t
    )
    cursor = parse_time(status.get("processedUntil"))
    if status.get("observedSchedule") != subject.spec.trigger_key:
        cursor = None  # an edit the operator has not seen yet: nothing is processed under it
    return Facts(
        slots=slots,
        start=start,
        cursor=cursor,
        now=now,
        runs=runs,
        skips=skips,
        skipped_counts=skipped,
        runs_gone=max(runs_created - visible, 0),
        buffered=waiting,
    )


def _events_of(subject: Subject, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    mine = []
    for event in events:
        involved = event.get("involvedObject")
        if not isinstance(involved, dict) or involved.get("kind") != KIND:
            continue
        uid = involved.get("uid")
        if uid == subject.uid or (not uid and involved.get("name") == subject.name):
            mine.append(event)
    return mine


def _latest(event: dict[str, Any]) -> datetime | None:
    match = _LATEST.search(str(event.get("message", "")))
    return parse_time(match.group(1)) if match else None


def _runs(subject: Subject, jobs: Sequence[dict[str, Any]]) -> tuple[list[RunRecord], int]:
    """The slots' runs the Jobs and status.recentRuns show, and how many runs that the status
    counts in runsCreated (slots' and run-nows' first attempts) are still visible."""
    records: list[RunRecord] = []
    counted: set[str] = set()
    adopted = subject.annotations.get(ANNOTATION_ADOPTED_FROM, "")
    for job in jobs:
        info = job_info(job)
        if info.owner_uid == subject.uid and info.trusted and info.slot is not None:
            if info.trigger not in REQUEST_TRIGGERS:
                counted.add(info.run_name)
            if info.trigger == TRIGGER_SCHEDULE:
                state = info.state.value
                records.append(RunRecord(info.slot, info.run_name, info.name, "cronlease", state))
        elif adopted.startswith("cronjob/"):
            record = _cronjob_run(job, adopted.removeprefix("cronjob/"))
            if record is not None:
                records.append(record)
    recent = subject.status.get("recentRuns")
    for entry in recent if isinstance(recent, list) else []:
        if not isinstance(entry, dict):
            continue
        slot = parse_time(entry.get("slot"))
        run = entry.get("run") or entry.get("job")
        if slot is None or not isinstance(run, str):
            continue
        trigger = entry.get("trigger")
        if trigger not in REQUEST_TRIGGERS:
            counted.add(run)
        if trigger == TRIGGER_SCHEDULE:
            result = str(entry.get("result", ""))
            records.append(RunRecord(slot, run, str(entry.get("job", run)), "cronlease", result))
    return records, len(counted)


def _cronjob_run(job: dict[str, Any], cronjob: str) -> RunRecord | None:
    """A Job the CronJob `cronjob` created (its controller owner reference), with its slot."""
    metadata = job.get("metadata")
    if not isinstance(metadata, dict):
        return None
    owners = metadata.get("ownerReferences")
    owned = isinstance(owners, list) and any(
        isinstance(o, dict)
        and o.get("kind") == "CronJob"
        and o.get("name") == cronjob
        and o.get("controller") is True
        for o in owners
    )
    name = metadata.get("name")
    if not owned or not isinstance(name, str):
        return None
    annotations = metadata.get("annotations")
    slot = parse_time(
        annotations.get(CRONJOB_SCHEDULED_TIMESTAMP) if isinstance(annotations, dict) else None
    )
    if slot is None and (match := _CRONJOB_SUFFIX.search(name)):
        slot = parse_time(_minutes(int(match.group(1))))
    if slot is None:
        return None
    return RunRecord(slot, name, name, f"cronjob/{cronjob}", _job_state(job))


def _minutes(minutes: int) -> str:
    try:
        return format_time(datetime.fromtimestamp(minutes * 60, UTC))
    except (OverflowError, ValueError, OSError):
        return ""


def _job_state(job: dict[str, Any]) -> str:
    return job_info(job).state.value
