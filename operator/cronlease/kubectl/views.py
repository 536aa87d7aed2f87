"""What `history`, `dead-letters`, `leader` and the request commands show, as plain records built
from API objects with "now" passed in. Every field is read totally: a hand-edited object shows
less, never raises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from cronlease.core.names.jobinfo import job_info
from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    LABEL_SCHEDULEDJOB,
    format_time,
    parse_time,
)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stamp(instant: datetime | None) -> str:
    return format_time(instant) if instant else ""


@dataclass(frozen=True)
class HistoryRow:
    run: str
    slot: str
    trigger: str
    attempts: int
    result: str
    lag_seconds: float | None
    job: str
    finished_at: str
    # What `-o wide` adds (known while the run's Jobs are kept), and the kind `-o name` prints.
    started_at: str = ""
    reason: str = ""
    kind: str = "Job"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def history(scheduled_job: dict[str, Any], jobs: Sequence[dict[str, Any]]) -> list[HistoryRow]:
    """The runs of a ScheduledJob, oldest slot first: status.recentRuns (the last 10, with their
    lag) and every run whose Jobs still exist, merged by run."""
    status = _mapping(scheduled_job.get("status"))
    uid = _text(_mapping(scheduled_job.get("metadata")).get("uid"))
    rows: dict[str, HistoryRow] = {}
    for job in jobs:
        info = job_info(job)
        if info.owner_uid != uid or not info.trusted or info.slot is None:
            continue
        known = rows.get(info.run_name)
        if known is not None and known.attempts >= info.attempt:
            continue
        rows[info.run_name] = HistoryRow(
            info.run_name,
            format_time(info.slot),
            info.trigger,
            info.attempt,
            "Dead letter" if info.dead_letter else info.state.value,
            None,
            info.name,
            _stamp(info.finished_at),
            _stamp(info.started_at),
            info.failure_reason,
            info.kind,
        )
    recent = status.get("recentRuns")
    for entry in recent if isinstance(recent, list) else []:
        entry = _mapping(entry)
        run = _text(entry.get("run")) or _text(entry.get("job"))
        slot = parse_time(entry.get("slot"))
        if not run or slot is None:
            continue
        lag = entry.get("lagSeconds")
        attempts = _number(entry.get("attempts")) or 1
        rows[run] = HistoryRow(
            run,
            format_time(slot),
            _text(entry.get("trigger")) or "Schedule",
            max(attempts, rows[run].attempts if run in rows else 1),
            _text(entry.get("result")),
            float(lag) if isinstance(lag, int | float) and not isinstance(lag, bool) else None,
            _text(entry.get("job")) or run,
            _text(entry.get("finishedAt")) or (rows[run].finished_at if run in rows else ""),
            *((rows[run].started_at, rows[run].reason, rows[run].kind) if run in rows else ()),
        )
    return sorted(rows.values(), key=lambda row: (row.slot, row.run))


@dataclass(frozen=True)
class DeadLetter:
    namespace: str
    scheduled_job: str
    run: str
    slot: str
    attempts: int
    reason: str
    failed_at: str
    job: str
    kind: str = "Job"  # a multi-step run's record is a Run

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def dead_letters(jobs: Sequence[dict[str, Any]]) -> list[DeadLetter]:
    """The dead letters among `jobs` (labelled cronlease.io/dead-letter=true: the record,
    design note 48), newest failure last."""
    letters = []
    for job in jobs:
        info = job_info(job)
        if not info.dead_letter or not info.trusted or info.slot is None:
            continue
        labels = _mapping(_mapping(job.get("metadata")).get("labels"))
        letters.append(
            DeadLetter(
                info.namespace,
                _text(labels.get(LABEL_SCHEDULEDJOB)),
                info.run_name,
                format_time(info.slot),
                info.attempt,
                info.failure_reason or "Failed",
                _stamp(info.finished_at),
                info.name,
                info.kind,
            )
        )
    return sorted(letters, key=lambda d: (d.failed_at, d.namespace, d.run))


@dataclass(frozen=True)
class Replica:
    identity: str
    token: int | None
    last_write: str  # the newest Job it created
    jobs: int
    holds_lease: bool


@dataclass(frozen=True)
class Leader:
    lease: str
    holder: str
    token: int | None
    since: str  # acquireTime
    renewed: str
    duration_seconds: int | None
    replicas: tuple[Replica, ...]
    pods: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["replicas"] = [asdict(r) for r in self.replicas]
        data["pods"] = list(self.pods)
        return data


def leader(
    lease: dict[str, Any], jobs: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]
) -> Leader:
    """The Lease's holder and its fencing token (leaseTransitions), and the replicas seen: every
    identity that wrote a Job among `jobs` (the leader annotates each with itself and its
    token), plus the operator's pods in the Lease's namespace."""
    metadata, spec = _mapping(lease.get("metadata")), _mapping(lease.get("spec"))
    holder = _text(spec.get("holderIdentity"))
    seen: dict[str, tuple[int | None, datetime | None, int]] = {}
    for job in jobs:
        annotations = _mapping(_mapping(job.get("metadata")).get("annotations"))
        identity = _text(annotations.get(ANNOTATION_LEADER))
        if not identity:
            continue
        token_text = _text(annotations.get(ANNOTATION_FENCING_TOKEN))
        token = int(token_text) if token_text.isascii() and token_text.isdigit() else None
        created = job_info(job).created_at
        old_token, old_time, count = seen.get(identity, (None, None, 0))
        newest = max((t for t in (old_time, created) if t), default=None)
        best = max((t for t in (old_token, token) if t is not None), default=None)
        seen[identity] = (best, newest, count + 1)
    if holder and holder not in seen:
        seen[holder] = (None, None, 0)
    replicas = tuple(
        Replica(identity, token, _stamp(last), count, identity == holder)
        for identity, (token, last, count) in sorted(
            seen.items(), key=lambda item: (item[1][1] is None, item[1][1] or 0, item[0])
        )
    )
    pod_names = tuple(sorted(_text(_mapping(pod.get("metadata")).get("name")) for pod in pods))
    return Leader(
        f"{_text(metadata.get('namespace'))}/{_text(metadata.get('name'))}",
        holder,
        _number(spec.get("leaseTransitions")),
        _text(spec.get("acquireTime")),
        _text(spec.get("renewTime")),
        _number(spec.get("leaseDurationSeconds")),
        replicas,
        pod_names,
    )


@dataclass(frozen=True)
class RequestProgress:
    name: str
    phase: str
    total: int
    started: int
    succeeded: int
    failed: int
    message: str
    skipped: int = 0  # targets another request replays (issue 33)

    @property
    def finished(self) -> bool:
        return self.phase in ("Complete", "Failed")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def request_progress(request: dict[str, Any]) -> RequestProgress:
    status = _mapping(request.get("status"))
    return RequestProgress(
        _text(_mapping(request.get("metadata")).get("name")),
        _text(status.get("phase")) or "Pending",
        _number(status.get("total")) or 0,
        _number(status.get("started")) or 0,
        _number(status.get("succeeded")) or 0,
        _number(status.get("failed")) or 0,
        _text(status.get("message")),
        _number(status.get("skipped")) or 0,
    )
