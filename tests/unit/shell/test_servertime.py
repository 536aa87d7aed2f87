"""The API server's clock bounds "now": a host clock that jumps ahead never moves a cursor ahead
of real time (issue 13: every ScheduledJob stalled until real time caught up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from builders import NAMESPACE
from harness import SLOT, Shell

from cronlease.core.names.naming import format_time, parse_time
from cronlease.shell import metrics
from cronlease.shell.applier import Outcome
from cronlease.shell.kube import SCHEDULEDJOBS
from cronlease.shell.servertime import TOLERANCE, ServerClock

SERVER = datetime(2026, 1, 5, 8, 31, 0, tzinfo=UTC)


class Clocks:
    def __init__(self, host: datetime) -> None:
        self.host, self.monotonic = host, 100.0

    def clock(self) -> ServerClock:
        return ServerClock(lambda: self.host, lambda: self.monotonic)


@pytest.mark.parametrize(
    ("host_offset", "expected_offset"),
    [
        (timedelta(0), timedelta(0)),
        (timedelta(seconds=1.5), timedelta(seconds=1.5)),  # within the tolerance: the host
        (timedelta(hours=1), TOLERANCE),  # a forward jump: the server's time + tolerance
        (timedelta(minutes=-10), timedelta(minutes=-10)),  # behind: late, never early
    ],
    ids=["agreed", "within-tolerance", "ahead", "behind"],
)
def test_now_is_the_host_time_bounded_by_the_servers(
    host_offset: timedelta, expected_offset: timedelta
) -> None:
    clocks = Clocks(SERVER + host_offset)
    server_clock = clocks.clock()
    server_clock.observe(format_datetime(SERVER, usegmt=True))
    clocks.monotonic += 30  # the reading ages on the monotonic clock, not the host's
    clocks.host += timedelta(seconds=30)
    assert server_clock.now() == SERVER + timedelta(seconds=30) + expected_offset
    assert metrics.clock_skew._value.get() == pytest.approx(host_offset.total_seconds())


@pytest.mark.parametrize("header", [None, "", "yesterday", "Mon, 05 Jan 2026 08:31:00"])
def test_without_a_usable_reading_now_is_the_hosts(header: str | None) -> None:
    clocks = Clocks(SERVER + timedelta(hours=1))
    server_clock = clocks.clock()
    server_clock.observe(header)
    assert server_clock.now() == SERVER + timedelta(hours=1)


def test_a_date_seen_again_keeps_its_first_reading() -> None:
    """Date has a resolution of a second: its first response is the nearest to the start of
    that second, and a later one with the same Date is not read again."""
    clocks = Clocks(SERVER)
    server_clock = clocks.clock()
    header = format_datetime(SERVER, usegmt=True)
    server_clock.observe(header)
    clocks.monotonic += 0.9
    server_clock.observe(header)
    assert server_clock.server_now() == SERVER + timedelta(seconds=0.9)
    clocks.monotonic += 0.2
    server_clock.observe(format_datetime(SERVER + timedelta(seconds=1), usegmt=True))
    assert server_clock.server_now() == SERVER + timedelta(seconds=1)


async def test_a_host_clock_jump_never_moves_the_cursor_ahead_of_the_server() -> None:
    clocks = Clocks(SLOT + timedelta(hours=1))  # the host jumped an hour ahead
    server_clock = clocks.clock()
    server_clock.observe(format_datetime(SLOT + timedelta(seconds=1), usegmt=True))
    shell = Shell(clock=server_clock.now)
    shell.create("report")
    assert (await shell.apply("report")).outcome is Outcome.DONE
    obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report")
    assert obj is not None
    processed = parse_time(obj["status"]["processedUntil"])
    assert processed == SLOT, format_time(processed or SLOT)  # not the hour of slots ahead
    assert obj["status"]["runsCreated"] == 1
