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

from cronlease.core.names.serverdate import ServerDate
from cronlease.shell import metrics

log = logging.getLogger(__name__)

# Date's one-second resolution, plus a response's latency, plus some slack.
TOLERANCE = timedelta(seconds=2)


class ServerClock(ServerDate):
    def __init__(
        self,
        host: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(monotonic)
        self._host = host
        self._warned = False

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
