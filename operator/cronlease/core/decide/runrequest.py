"""A RunRequest (issue 15, item 4): a user's request for runs the schedule did not make. Either a
replay (of named runs, or of every dead letter) or a backfill (of the schedule's slots in a past
window). The fence lets only the leader create cronlease's Jobs, so users ask through this object,
with RBAC of its own, and the leader runs each target once (cronlease.core.decide.requestplan).

Pure: parsing the request, and the bookkeeping of its status. Like the ScheduledJob's, the
request's spec is re-checked here although the CRD's schema checks it at apply: objects can
predate a CRD upgrade, and a window's size and its place in time are beyond the schema.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronlease.core.decide.decision import ObjectRef
from cronlease.core.names.conditions import Summary, summarize_status
from cronlease.core.names.naming import REQUEST_KIND, format_time, parse_time, parse_time_strictly
from cronlease.core.specs.spec import RUN_AT_EARLIEST, RUN_AT_LATEST

# Targets one request may have: a backfill window's slots, or the runs it replays.
MAX_TARGETS = 1000
# With Allow, a decision starts at most this many targets; the next decision comes at once.
MAX_STARTS_PER_DECISION = 100


class RequestAction(enum.StrEnum):
    REPLAY = "Replay"
    BACKFILL = "Backfill"


class RequestPolicy(enum.StrEnum):
    FORBID = "Forbid"  # one target at a time, and only while no run of the ScheduledJob is active
    ALLOW = "Allow"  # every target at once


class RequestPhase(enum.StrEnum):
    PENDING = "Pending"  # its ScheduledJob does not exist (yet): accepted once it does
    RUNNING = "Running"
    COMPLETE = "Complete"  # every target ran and ended (`failed` says how many failed)
    FAILED = "Failed"  # the request could not be carried out (`message` says why)


class RequestError(ValueError):
    """A request the operator cannot carry out; the message names the field."""


@dataclass(frozen=True)
class RequestSpec:
    scheduled_job: str
    action: RequestAction
    policy: RequestPolicy = RequestPolicy.FORBID
    runs: tuple[str, ...] = ()  # replay: these runs (by run name or by the name of any attempt)
    dead_letters: bool = False  # replay: every dead letter of the ScheduledJob
    start: datetime | None = None  # backfill: the window, both ends included
    end: datetime | None = None


def parse_request_spec(raw: object) -> RequestSpec:
    if not isinstance(raw, dict):
        raise RequestError("spec: must be an object")
    name = raw.get("scheduledJobName")
    if not isinstance(name, str) or not name:
        raise RequestError("spec.scheduledJobName: required")
    policy = raw.get("concurrencyPolicy", RequestPolicy.FORBID.value)
    if not isinstance(policy, str) or policy not in {p.value for p in RequestPolicy}:
        raise RequestError(f"spec.concurrencyPolicy: must be Forbid or Allow, not {policy!r}")
    replay, backfill = raw.get("replay"), raw.get("backfill")
    if (replay is None) == (backfill is None):
        raise RequestError("spec: exactly one of replay and backfill")
    if replay is not None:
        return _replay(name, RequestPolicy(policy), replay)
    return _backfill(name, RequestPolicy(policy), backfill)


def _replay(name: str, policy: RequestPolicy, replay: object) -> RequestSpec:
    if not isinstance(replay, dict):
        raise RequestError("spec.replay: must be an object")
    runs = replay.get("runs")
    dead_letters = replay.get("deadLetters", False)
    if not isinstance(dead_letters, bool):
        raise RequestError("spec.replay.deadLetters: must be true or false")
    if runs is None:
        if not dead_letters:
            raise RequestError("spec.replay: name runs, or set deadLetters: true")
        return RequestSpec(name, RequestAction.REPLAY, policy, dead_letters=True)
    if dead_letters:
        raise RequestError("spec.replay: name runs, or set deadLetters: true, not both")
    if not isinstance(runs, list) or not runs or len(runs) > MAX_TARGETS:
        raise RequestError(f"spec.replay.runs: a list of 1 to {MAX_TARGETS} names")
    for index, run in enumerate(runs):
        if not isinstance(run, str) or not run:
            raise RequestError(f"spec.replay.runs[{index}]: must be a name")
    if len(set(runs)) != len(runs):
        raise RequestError("spec.replay.runs: names a run twice")
    return RequestSpec(name, RequestAction.REPLAY, policy, runs=tuple(runs))


def _backfill(name: str, policy: RequestPolicy, backfill: object) -> RequestSpec:
    if not isinstance(backfill, dict):
        raise RequestError("spec.backfill: must be an object")
    ends = []
    for field in ("from", "to"):
        text = backfill.get(field)
        if not isinstance(text, str):
            raise RequestError(f"spec.backfill.{field}: required, an RFC 3339 time")
        try:
            ends.append(parse_time_strictly(text))
        except (ValueError, OverflowError):
            raise RequestError(f"spec.backfill.{field}: not an RFC 3339 time: {text!r}") from None
    start, end = ends
    if end < start:
        raise RequestError("spec.backfill.to: before spec.backfill.from")
    if start < RUN_AT_EARLIEST or end > RUN_AT_LATEST:
        raise RequestError(
            f"spec.backfill: the window must lie between {format_time(RUN_AT_EARLIEST)} and "
            f"{format_time(RUN_AT_LATEST)}"
        )
    return RequestSpec(name, RequestAction.BACKFILL, policy, start=start, end=end)


@dataclass(frozen=True)
class RunRequestView:
    """The parts of a RunRequest object the planner reads."""

    name: str
    namespace: str
    uid: str
    version: str
    created_at: datetime | None
    spec: dict[str, Any]
    status: dict[str, Any]
    generation: int = 1  # its spec is immutable: always 1, unless the CRD's rule is lifted

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> RunRequestView:
        metadata = obj["metadata"]
        spec, status = obj.get("spec"), obj.get("status")
        return cls(
            name=metadata["name"],
            namespace=metadata.get("namespace", ""),
            uid=metadata.get("uid", ""),
            version=str(metadata.get("resourceVersion", "")),
            created_at=parse_time(metadata.get("creationTimestamp")),
            spec=spec if isinstance(spec, dict) else {},
            status=status if isinstance(status, dict) else {},
            generation=_generation(metadata.get("generation")),
        )

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name, self.uid, REQUEST_KIND)


def scheduled_job_of(obj: dict[str, Any]) -> str | None:
    """The ScheduledJob a RunRequest object names, if it names one."""
    spec = obj.get("spec")
    name = spec.get("scheduledJobName") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class Holder:
    """The target of another request that held a run when this request was accepted: that
    request replays the run (or will), so this one does not (issue 33, finding 10)."""

    name: str
    uid: str
    index: int

    def to_status(self) -> dict[str, str | int]:
        return {"name": self.name, "uid": self.uid, "index": self.index}

    @classmethod
    def from_status(cls, entry: object) -> Holder | None:
        """Totally: None for anything but the operator's own form."""
        if not isinstance(entry, dict):
            return None
        name, uid, index = entry.get("name"), entry.get("uid"), entry.get("index")
        if not isinstance(name, str) or not isinstance(uid, str) or not name or not uid:
            return None
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_TARGETS:
            return None
        return cls(name, uid, index)


@dataclass(frozen=True)
class ReplayTarget:
    """A run a replay runs again: its slot (and run-now token), kept in status from acceptance,
    so that the replay keeps the original's idempotency key when the original's Jobs are gone;
    and the request that held the run then, if one did."""

    run: str
    slot: datetime
    run_now_token: str | None = None
    held_by: Holder | None = None

    def to_status(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"run": self.run, "slot": format_time(self.slot)}
        if self.run_now_token:
            entry["runNowToken"] = self.run_now_token
        if self.held_by is not None:
            entry["heldBy"] = self.held_by.to_status()
        return entry


def replay_targets(status: dict[str, Any]) -> list[ReplayTarget] | None:
    """status.targets as written at acceptance; None if any entry is unreadable (edited)."""
    entries = status.get("targets")
    if not isinstance(entries, list):
        return None
    targets = []
    for entry in entries:
        slot = parse_time(entry.get("slot")) if isinstance(entry, dict) else None
        if slot is None or not isinstance(entry.get("run"), str):
            return None
        token = entry.get("runNowToken")
        held_by = Holder.from_status(entry.get("heldBy"))
        if held_by is None and entry.get("heldBy") is not None:
            return None
        targets.append(
            ReplayTarget(entry["run"], slot, token if isinstance(token, str) else None, held_by)
        )
    return targets


# status.succeededIndexes and failedIndexes, in the form of a Job's completedIndexes: "0-3,7".
_INTERVAL = re.compile(r"^(\d{1,6})(?:-(\d{1,6}))?$")


def format_indexes(indexes: Iterable[int]) -> str:
    ordered = sorted(set(indexes))
    parts: list[str] = []
    start = previous = None
    for index in [*ordered, None]:
        if index is not None and previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = index
    return ",".join(parts)


def parse_indexes(text: object) -> set[int]:
    """Total: an unreadable interval (a hand edit) reads as no index."""
    indexes: set[int] = set()
    if not isinstance(text, str) or not text:
        return indexes
    for part in text.split(","):
        match = _INTERVAL.match(part)
        if match is None:
            continue
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if first <= last < MAX_TARGETS:
            indexes.update(range(first, last + 1))
    return indexes


def _generation(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def summarize_request(status: dict[str, Any], generation: int, now: datetime) -> None:
    """Ready, Reconciling and Stalled (cronlease.core.names.conditions) from the phase, in place:
    pending (its ScheduledJob is not there yet) and running are work under way; complete is ready if
    every run succeeded or was skipped, stalled if some failed, as a failed request is."""
    phase = status.get("phase")
    message = str(status.get("message") or "")
    failed = count(status, "failed")
    if phase == RequestPhase.COMPLETE:
        summary = Summary.STALLED if failed else Summary.READY
        reason = "RunsFailed" if failed else "Complete"
    elif phase == RequestPhase.FAILED:
        summary, reason = Summary.STALLED, "Failed"
    else:
        summary, reason = Summary.RECONCILING, str(phase or RequestPhase.PENDING)
    summarize_status(status, summary, reason, message, generation, now)


def count(status: dict[str, Any], field: str) -> int:
    """A count in status, totally: no count of targets exceeds MAX_TARGETS, whatever is written."""
    value = status.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return 0
    return min(value, MAX_TARGETS)
