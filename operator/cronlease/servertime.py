"""The API server's clock, as the leader's upper bound on "now" (issue 13, item 5).

A decision moves `status.processedUntil` up to "now". Read from the host clock alone, a clock
that jumps forward (a bad NTP step, a VM resumed with a stale offset) moves every cursor ahead of
real time: slots are recorded as due (and run early, or skipped as late), and nothing runs until
real time catches up. Every response of the API server carries its clock in the `Date` header;
the leader talks to it every retry period (the Lease), so a recent reading is always at hand.

The reading is dated on the monotonic clock, which never jumps: the server's time now is the
last reading plus the monotonic time since. `Date` has a resolution of one second, so the bound
is that estimate plus TOLERANCE. A host clock behind the server is not corrected (slots then run
late, never twice): only the forward direction can record a slot before it happened.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from cronlease import metrics

log = logging.getLogger(__name__)

# Date's one-second resolution, plus a response's latency, plus some slack.
TOLERANCE = timedelta(seconds=2)


class ServerClock:
    def __init__(
        self,
        host: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._host, self._monotonic = host, monotonic
        self._reading: tuple[datetime, float] | None = None  # (server time, monotonic then)
        self._date = ""  # the Date header of that reading
        self._warned = False

    def observe(self, date_header: str | None) -> None:
        """A response's `Date` header (RFC 7231); anything unparseable is ignored. A Date seen
        again keeps its first reading, the one nearest the start of its second: at a burst
        hundreds of responses share one, and parsing each was a fiftieth of the operator's CPU."""
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
        if self._reading is None:
            return None
        server, at = self._reading
        return server + timedelta(seconds=self._monotonic() - at)

    def now(self) -> datetime:
        """The host's time, but never later than the server's time plus TOLERANCE."""
        host = self._host()
        server = self.server_now()
        if server is None:
            return host
        skew = host - server
        metrics.clock_skew.set(skew.total_seconds())
        if skew > TOLERANCE:
            if not self._warned:
                log.warning(
                    "the host clock is %.1f s ahead of the API server's: deciding on the "
                    "server's time",
                    skew.total_seconds(),
                )
                self._warned = True
            return server + TOLERANCE
        self._warned = False
        return host
