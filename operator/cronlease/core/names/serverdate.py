"""The API server's clock, read from the `Date` header of its answers. Pure: no metrics, no
logging and no clock of its own (the caller gives the monotonic one), so the kubectl plugin
reads it as the operator does (cronlease.shell.servertime adds the operator's use of it).

Every answer of the API server carries `Date` (RFC 9110, one-second resolution). A reading is
dated on the monotonic clock, which never jumps: the server's time later is the last reading
plus the monotonic time since.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime


class ServerDate:
    def __init__(self, monotonic: Callable[[], float]) -> None:
        # The monotonic clock is given, never read here: the core reads no clock of its own.
        self._monotonic = monotonic
        self._reading: tuple[datetime, float] | None = None  # (server time, monotonic then)
        self._date = ""  # the Date header of that reading

    def observe(self, date_header: str | None) -> None:
        """An answer's `Date`; anything unparseable is ignored. A Date seen again keeps its first
        reading, the one nearest the start of its second: at a burst hundreds of answers share
        one, and parsing each was a fiftieth of the operator's CPU."""
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

    def server_now(self) -> datetime | None:
        """The server's time now (at most a second behind it), or None before any answer."""
        if self._reading is None:
            return None
        server, at = self._reading
        return server + timedelta(seconds=self._monotonic() - at)
