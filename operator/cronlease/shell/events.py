"""Kubernetes Events on a ScheduledJob: what `kubectl describe` shows a user about each decision.

Events are aggregated, as client-go's event correlator and events.k8s.io/v1 series do: one core/v1
Event per (ScheduledJob uid, type, reason) with a count, not one per occurrence. Before, a
per-second ScheduledJob whose slots were all skipped left about 7,200 live Events an hour (the API
server keeps each for its event TTL, 1 h by default).

- The Event's name is a function of the key (`event_name`), so every replica and every later
  leader finds the same object. The first occurrence POSTs it; a 409 AlreadyExists means it is
  there already (an earlier leader's, another replica's, or ours from before a restart): it is
  read, and continued from its count.
- Later occurrences PATCH it: count, lastTimestamp and the latest message, in a merge patch
  conditional on its resourceVersion. A 404 (expired, or deleted) creates it again; a 409 Conflict
  (someone else wrote it meanwhile) reads it and patches again, from its count.
- One write per key at a time: occurrences that arrive while a key's write waits (creations go
  first) or is in flight go out together in its next write, with the summed count.
- A series ends after `window` seconds without an occurrence (client-go's 10 minutes): the next one
  starts the same Event again at count 1 with a new firstTimestamp. A count therefore means "this
  often since firstTimestamp, with no pause longer than the window", and a key never has more than
  one Event.
- Memory: one entry per key, dropped `keep` seconds after its last occurrence (by then the
  Event has most likely expired) or, beyond `max_keys` entries, oldest first. A dropped key starts
  again with a POST, and its 409 finds the Event.

Best effort throughout: an Event that cannot be written is logged, never fatal to a decision. The
state is per replica and unfenced, like the Events themselves.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cronlease.core.decide.decision import ObjectRef
from cronlease.core.names.naming import GROUP, VERSION, format_time, parse_time
from cronlease.shell.kube import ApiError, KubeApi, TransportError

log = logging.getLogger(__name__)
COMPONENT = "cronlease"

# client-go's correlator aggregates similar Events within 10 minutes of the previous one.
WINDOW = 600.0
# kube-apiserver's default --event-ttl: an Event not written for this long is gone.
EVENT_TTL = 3600.0
MAX_KEYS = 10_000
# Writes per flush: a POST met by 409, the GET, the PATCH, and one more for a race.
ATTEMPTS = 4
MAX_NAME = 253  # an Event's name is a DNS subdomain
DIGEST = 16

Key = tuple[str, str, str]  # (ScheduledJob uid, type, reason)


def event_name(ref: ObjectRef, event_type: str, reason: str) -> str:
    """`<ScheduledJob name>.<digest of uid, type and reason>`, at most 253 characters: another
    ScheduledJob (or a later one of the same name) never shares it."""
    digest = hashlib.sha256(f"{ref.uid}/{event_type}/{reason}".encode()).hexdigest()[:DIGEST]
    prefix = ref.name[: MAX_NAME - 1 - DIGEST].rstrip(".-")
    return f"{prefix}.{digest}"


def stamp(epoch: float) -> str:
    return format_time(datetime.fromtimestamp(epoch, UTC))


def event_body(
    sj: ObjectRef,
    event_type: str,
    reason: str,
    message: str,
    instance: str,
    *,
    name: str,
    count: int,
    first: str,
    last: str,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": sj.namespace},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": sj.kind,
            "name": sj.name,
            "namespace": sj.namespace,
            "uid": sj.uid,
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": f"{GROUP}/operator",
        "reportingInstance": instance[:128],
        "firstTimestamp": first,
        "lastTimestamp": last,
        "count": count,
    }


class EventNotWritten(Exception):
    """The Event's name is held by someone else's Event, or it kept changing under us."""


@dataclass(slots=True, eq=False)
class EventSeries:
    """One key's Event: what the API server holds, as far as this replica knows, and the
    occurrences not yet written.

    The recorder keeps one per key for an hour (`keep`): at 5,000 ScheduledJobs that is 10,000 of
    them at rest, so an idle one keeps only what the next write needs. The message goes once
    written, the name is derived again when a write needs it, the first timestamp is a number,
    and the ref's strings are the ones the model already interned (decision 0015; design note 118).
    """

    ref: ObjectRef
    event_type: str
    reason: str
    seen: float  # when the latest occurrence was recorded: the window runs from it
    message: str = ""  # the latest occurrence's, until it is written
    pending: int = 0  # occurrences not yet written
    pending_since: float = 0.0  # when the first of them was recorded
    count: int = 0  # the Event's count in the current series; 0: the series is not written yet
    first: float = 0.0  # the current series' firstTimestamp (epoch seconds)
    version: str = ""  # the Event's resourceVersion as last read or written; "": none known
    writer: bool = False  # a write is scheduled or under way

    @property
    def name(self) -> str:
        return event_name(self.ref, self.event_type, self.reason)


def _shared(ref: ObjectRef) -> ObjectRef:
    """`ref` with interned strings: the model keeps the namespace and the ScheduledJob's uid
    interned, so a series held for an hour shares them instead of pinning its own copies."""
    return ObjectRef(
        sys.intern(ref.namespace), sys.intern(ref.name), sys.intern(ref.uid), sys.intern(ref.kind)
    )


class EventRecorder:
    """Aggregates Events per key; the caller runs the writes (`record`, then `flush`), so that it
    decides when they go and how many at once."""

    def __init__(
        self,
        api: KubeApi,
        instance: Callable[[], str],
        clock: Callable[[], float] = time.time,
        window: float = WINDOW,
        keep: float = EVENT_TTL,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self.api, self.instance, self.clock = api, instance, clock
        self.window, self.keep, self.max_keys = window, max(keep, window), max_keys
        # Ordered by latest occurrence, oldest first (an occurrence moves its key to the end).
        self._series: dict[Key, EventSeries] = {}

    def __len__(self) -> int:
        return len(self._series)

    def record(
        self, ref: ObjectRef, event_type: str, reason: str, message: str
    ) -> EventSeries | None:
        """Count one occurrence. Returns the series if the caller must start a writer for it
        (`flush` until it returns False); None if a write for it is already scheduled."""
        # Normal ones at debug (--verbose): the Event is the record, and at a burst of 1,000
        # creations a line each was 4% of the operator's CPU (decision 0016; design note 96).
        log.log(
            logging.WARNING if event_type == "Warning" else logging.DEBUG,
            "%s/%s %s: %s",
            ref.namespace,
            ref.name,
            reason,
            message,
        )
        now = self.clock()
        key = (ref.uid, event_type, reason)
        series = self._series.pop(key, None)
        if series is None:
            ref = _shared(ref)
            key = (ref.uid, event_type, reason)
            series = EventSeries(ref, event_type, reason, now)
        elif now - series.seen > self.window and not series.writer:
            # The series ended: the next write starts it anew. (An occurrence that finds a write
            # still under way joins that write's series.)
            series.count, series.first = 0, 0.0
        self._series[key] = series
        self._expire(now)
        series.seen, series.message = now, message
        if not series.pending:
            series.pending_since = now
        series.pending += 1
        if series.writer:
            return None
        series.writer = True
        return series

    def _expire(self, now: float) -> None:
        """Drop the entries idle for longer than `keep`, and the oldest beyond `max_keys`. A
        dropped entry's writer, if any, still finishes with it."""
        while self._series:
            key, series = next(iter(self._series.items()))
            if len(self._series) <= self.max_keys and now - series.seen <= self.keep:
                return
            del self._series[key]

    async def flush(self, series: EventSeries) -> bool:
        """Write the pending occurrences in one write. True if more arrived meanwhile: the caller
        flushes again (after its own wait); False when this writer is done."""
        count, message, since = series.pending, series.message, series.pending_since
        latest = series.seen
        series.pending = 0
        failed = False
        if count:
            try:
                await self._write(series, count, message, since, latest)
            except (ApiError, TransportError) as error:
                failed = True
                log.warning(
                    "could not write event %s on %s/%s: %s",
                    series.reason,
                    series.ref.namespace,
                    series.ref.name,
                    error,
                )
            except EventNotWritten as error:
                log.warning("event %s not written: %s", series.name, error)
        if series.pending:
            if failed:  # they go with the next write, which more occurrences now make
                series.pending += count
                series.pending_since = since
            return True
        if failed:  # they go with the next occurrence's write: no retry loop of our own
            series.pending, series.pending_since = count, since
        else:
            series.message = ""  # written: an idle series keeps no text
        series.writer = False
        return False

    async def _write(
        self, series: EventSeries, count: int, message: str, since: float, latest: float
    ) -> None:
        """`since` and `latest`: when the first and the last of the `count` occurrences were
        recorded (a write may wait for creations: lastTimestamp is the occurrence's, as
        client-go's correlator sets it, not the write's)."""
        now = self.clock()
        ref = series.ref
        for _ in range(ATTEMPTS):
            if not series.count:  # a new series starts at its first unwritten occurrence
                series.first = since
            total = series.count + count
            try:
                if series.version:
                    patch = {
                        "metadata": {"resourceVersion": series.version},
                        "count": total,
                        "firstTimestamp": stamp(series.first),
                        "lastTimestamp": stamp(latest),
                        "message": message[:1024],
                    }
                    written = await self.api.patch_event(ref.namespace, series.name, patch)
                else:
                    body = event_body(
                        ref,
                        series.event_type,
                        series.reason,
                        message,
                        self.instance(),
                        name=series.name,
                        count=total,
                        first=stamp(series.first),
                        last=stamp(latest),
                    )
                    written = await self.api.create_event(body)
            except ApiError as error:
                if error.status == 404 and series.version:  # expired or deleted: create anew
                    series.version, series.count = "", 0
                    continue
                if error.status == 409:  # AlreadyExists, or changed since we wrote it
                    await self._read(series, now)
                    continue
                raise
            series.count, series.version = total, str(written["metadata"]["resourceVersion"])
            return
        raise EventNotWritten(f"still changing after {ATTEMPTS} attempts")

    async def _read(self, series: EventSeries, now: float) -> None:
        """Take the Event as the API server has it: its series continues if it was written within
        the window, else the next write starts it anew."""
        try:
            existing = await self.api.get_event(series.ref.namespace, series.name)
        except ApiError as error:
            if error.status != 404:
                raise
            series.version, series.count = "", 0  # gone meanwhile: create it
            return
        involved = existing.get("involvedObject") or {}
        if (involved.get("uid"), existing.get("type"), existing.get("reason")) != (
            series.ref.uid,
            series.event_type,
            series.reason,
        ):
            raise EventNotWritten("the name is held by another object's Event")
        series.version = str(existing["metadata"]["resourceVersion"])
        last = parse_time(existing.get("lastTimestamp"))
        count = existing.get("count")
        first = parse_time(existing.get("firstTimestamp"))
        recent = last is not None and now - last.timestamp() <= self.window
        if recent and first is not None and isinstance(count, int):
            series.count = max(count, 0)
            series.first = first.timestamp()
        else:
            series.count = 0
