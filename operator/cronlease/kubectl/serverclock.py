"""The API server's clock, as the plugin reads it: the `Date` header of its latest answer.

What `adopt` counts against "now" (the slots the CronJob missed, the DST hours ahead) is the
API server's time, the time the operator decides on and stamps objects with; the host running
kubectl may be off either way. Every answer of the API server carries `Date` (one-second
resolution). A reading is dated on the monotonic clock, which never jumps, so the server's time
later is that reading plus the monotonic time since. The operator's `cronlease.servertime` reads
the same header; it is not imported here, as it brings the operator's metrics with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime


class ServerClock:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._reading: tuple[datetime, float] | None = None  # (server time, monotonic then)
        self._date = ""

    def observe(self, date_header: str | None) -> None:
        """A response's `Date` (RFC 9110); anything unparseable is ignored. A Date seen again
        keeps its first reading, the one nearest the start of its second."""
        if not date_header or date_header == self._date:
            return
        try:
            server = parsedate_to_datetime(date_header)
        except (TypeError, ValueError):
            return
        if server.tzinfo is None:
            return
        self._reading = (server.astimezone(UTC), self._monotonic())
        self._date = date_header

    def now(self) -> datetime | None:
        """The server's time now (at most a second behind it), or None before any answer."""
        if self._reading is None:
            return None
        server, at = self._reading
        return server + timedelta(seconds=self._monotonic() - at)
