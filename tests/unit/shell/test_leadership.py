"""The Lease elector, case by case, with an injected clock, on the fake API server.

In the style of client-go's leaderelection tests: each case starts from a Lease on the server (or
none), runs election rounds at given instants of the elector's own monotonic clock, and checks
who leads with which token, what the Lease says, and the exact calls made: a call the case does
not expect fails it.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fakeapi import FakeApiServer
from harness import eventually

from cronlease.shell.kube import LEASES, ApiError, KubeApi
from cronlease.shell.leadership import ElectionConfig, LeaseElector

NS, NAME = "cronlease-system", "cronlease-leader"
CONFIG = ElectionConfig(NS, NAME, lease_duration=15, renew_deadline=10, retry_period=2)
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
GET, PUT, POST = ("GET", LEASE_PATH), ("PUT", LEASE_PATH), ("POST", LEASE_PATH.rsplit("/", 1)[0])


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lease(
    holder: Any, transitions: Any, renew: str = "2026-01-05T09:00:00.000000Z", **spec: Any
) -> dict[str, Any]:
    """A Lease as someone else wrote it; `spec` sets or overrides fields (bad ones included)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": renew,
            "leaseTransitions": transitions,
            **spec,
        },
    }


@dataclass
class Case:
    name: str
    existing: dict[str, Any] | None
    rounds: list[float]  # clock readings at which the elector runs one round
    leading: bool
    token: int
    holder: Any  # on the server afterwards
    calls: list[tuple[str, str]]
    between: Callable[[FakeApiServer, int], None] = field(default=lambda server, i: None)
    # What happens while a round's GET is on its way (the GET is held until it has happened).
    during_get: Callable[[FakeApiServer, Clock, int], None] | None = None


def renewed_by_other(server: FakeApiServer, round_index: int) -> None:
    """The other holder renews between our rounds: its renewTime changes each time."""
    server.edit(
        *LEASES, NS, NAME, {"spec": {"renewTime": f"2026-01-05T09:00:{round_index:02d}.0Z"}}
    )


def conflict_on_put(server: FakeApiServer, round_index: int) -> None:
    if round_index == 0:
        server.fail("PUT", LEASE_PATH, 409)


def renewed_during_a_slow_get(server: FakeApiServer, clock: Clock, round_index: int) -> None:
    """Round 0's GET takes 10 s, and the holder renews while it is on its way."""
    if round_index == 0:
        clock.now += 10
        renewed_by_other(server, 1)


def deleted(server: FakeApiServer, round_index: int) -> None:
    if round_index == 1:
        server.remove(*LEASES, NS, NAME)


def recreated_released(server: FakeApiServer, round_index: int) -> None:
    """Someone deletes the Lease and creates it again (a restore, a script): the count is 0."""
    if round_index == 1:
        server.remove(*LEASES, NS, NAME)
        server.put(lease("", 0))


def recreated_by_other(server: FakeApiServer, round_index: int) -> None:
    if round_index == 1:
        server.remove(*LEASES, NS, NAME)
        server.put(lease("other", 0, renew="2026-01-05T09:01:00.000000Z"))


def count_edited(value: Any) -> Callable[[FakeApiServer, int], None]:
    def edit(server: FakeApiServer, round_index: int) -> None:
        if round_index == 1:
            server.edit(*LEASES, NS, NAME, {"spec": {"leaseTransitions": value}})

    return edit


CASES = [
    Case("acquire: no Lease yet", None, [0], True, 0, "me", [GET, POST]),
    Case("acquire: an empty holder (released)", lease("", 3), [0], True, 4, "me", [GET, PUT]),
    # A leader renews with one PUT of what its last write returned (client-go's fast path).
    Case("renew: ours, token kept", lease("me", 5), [0, 2, 4], True, 5, "me", [GET, PUT, PUT, PUT]),
    Case(
        "observe: another holder's Lease is valid until OUR clock says it expired",
        lease("other", 2),
        [0, 14.9],
        False,
        -1,
        "other",
        [GET, GET],
    ),
    Case(
        "expire: after lease_duration on our clock with no renewal seen, take it over",
        lease("other", 2),
        [0, 15.1],
        True,
        3,
        "me",
        [GET, GET, PUT],
    ),
    Case(
        "a holder that keeps renewing never expires, however long we watch",
        lease("other", 2),
        [0, 10, 20, 30],
        False,
        -1,
        "other",
        [GET] * 4,
        renewed_by_other,
    ),
    Case(
        "conflict: somebody else wrote first; we do not lead",
        lease("", 1),
        [0],
        False,
        -1,
        "",
        [GET, PUT],
        conflict_on_put,
    ),
    # A renewal is dated when our read of it came back, not when we sent the GET.
    Case(
        "slow GET: a renewal read by it is valid for lease_duration after the response",
        lease("other", 2),
        [0, 15.1],  # round 0's response comes at 10
        False,
        -1,
        "other",
        [GET, GET],
        during_get=renewed_during_a_slow_get,
    ),
    Case(
        "slow GET: the Lease expires lease_duration after the response that showed the renewal",
        lease("other", 2),
        [0, 25.1],
        True,
        3,
        "me",
        [GET, GET, PUT],
        during_get=renewed_during_a_slow_get,
    ),
    # A Lease is input: anything someone else wrote is read totally, never raised.
    Case(
        "a foreign duration of 10^9 s counts as 10 x ours: valid at 149.9 s",
        lease("other", 2, leaseDurationSeconds=10**9),
        [0, 149.9],
        False,
        -1,
        "other",
        [GET, GET],
    ),
    Case(
        "a foreign duration of 10^9 s counts as 10 x ours: expired at 150.1 s",
        lease("other", 2, leaseDurationSeconds=10**9),
        [0, 150.1],
        True,
        3,
        "me",
        [GET, GET, PUT],
    ),
    Case(
        "a negative duration counts as ours",
        lease("other", 2, leaseDurationSeconds=-5),
        [0, 14.9],
        False,
        -1,
        "other",
        [GET, GET],
    ),
    Case(
        "a duration that is no number counts as ours",
        lease("other", 2, leaseDurationSeconds="soon"),
        [0, 14.9, 15.1],
        True,
        3,
        "me",
        [GET, GET, GET, PUT],
    ),
    Case(
        "a holder that is no string is somebody's: valid until it expires",
        lease(0, 2),
        [0, 14.9],
        False,
        -1,
        0,
        [GET, GET],
    ),
    Case(
        "a holder that is no string is somebody's: it expires like anybody's",
        lease(0, 2),
        [0, 15.1],
        True,
        3,
        "me",
        [GET, GET, PUT],
    ),
    Case(
        "a count that is no number: a token anyway",
        lease("", "seven"),
        [0],
        True,
        0,
        "me",
        [GET, PUT],
    ),
    Case("a negative count: a token anyway", lease("", -3), [0], True, 0, "me", [GET, PUT]),
    Case(
        "a spec that is no object reads as empty (released, count 0)",
        {**lease("", 0), "spec": "garbage"},
        [0],
        True,
        1,
        "me",
        [GET, PUT],
    ),
    # The token never goes back to one used before, whatever happens to the Lease.
    Case(
        "deleted while we lead: recreated with a token above ours",
        lease("me", 5),
        [0, 2],
        True,
        6,
        "me",
        [GET, PUT, PUT, GET, POST],  # the renewal's 404 sends it to a read
        deleted,
    ),
    Case(
        "recreated released with count 0 after we saw 5: we write 6",
        lease("other", 5),
        [0, 2],
        True,
        6,
        "me",
        [GET, GET, PUT],
        recreated_released,
    ),
    Case(
        "recreated by another holder with count 0 after we saw 5: at its expiry we write 6",
        lease("other", 5),
        [0, 2, 17.1],
        True,
        6,
        "me",
        [GET, GET, GET, PUT],
        recreated_by_other,
    ),
    Case(
        "our count edited down while we lead: a new token above the old",
        lease("me", 5),
        [0, 2],
        True,
        6,
        "me",
        [GET, PUT, PUT, GET, PUT],  # the renewal's 409 (the edit moved the resourceVersion)
        count_edited(0),
    ),
    Case(
        "our count overwritten with garbage while we lead: a new token, the count mended",
        lease("me", 5),
        [0, 2],
        True,
        6,
        "me",
        [GET, PUT, PUT, GET, PUT],
        count_edited("x"),
    ),
]


async def one_round(
    server: FakeApiServer, elector: LeaseElector, clock: Clock, case: Case, index: int
) -> None:
    if case.during_get is None:
        await elector.tick()
        return
    gate = asyncio.Event()
    server.hold("GET", LEASE_PATH, gate)
    ticking = asyncio.create_task(elector.tick())
    await eventually(lambda: server.held == 1)
    case.during_get(server, clock, index)
    gate.set()
    await ticking


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_election_round(case: Case) -> None:
    server, clock = FakeApiServer(), Clock()
    if case.existing is not None:
        server.put(case.existing)
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    for index, instant in enumerate(case.rounds):
        case.between(server, index)
        clock.now = instant
        await one_round(server, elector, clock, case, index)
    assert server.calls == case.calls
    assert elector.is_leading() is case.leading
    if case.leading:
        assert elector.token == case.token
    stored = server.get(*LEASES, NS, NAME)
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == case.holder
    if case.leading:
        assert stored["spec"]["leaseTransitions"] == case.token


async def test_a_leader_stops_acting_at_its_renew_deadline_before_the_lease_can_expire() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    server.fail("PUT", LEASE_PATH, 500, times=100)  # renewals fail from now on
    server.fail("GET", LEASE_PATH, 500, times=100)
    clock.now = 9.9
    with pytest.raises(ApiError):
        await elector.tick()
    assert elector.is_leading()
    clock.now = 10.0
    assert not elector.is_leading()  # 5 s before anyone else may take the Lease


async def test_release_empties_the_holder_and_a_standby_takes_over_at_once() -> None:
    server, clock = FakeApiServer(), Clock()
    leader = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    standby = LeaseElector(KubeApi(server), "standby", CONFIG, clock)
    await leader.tick()
    await standby.tick()
    await leader.release()
    assert not leader.is_leading()
    stored = server.get(*LEASES, NS, NAME)
    assert stored is not None
    assert (stored["spec"]["holderIdentity"], stored["spec"]["leaseDurationSeconds"]) == ("", 1)
    await standby.tick()  # no waiting for expiry
    assert standby.is_leading()
    assert standby.token == 1
    await leader.tick()  # a released elector never takes the Lease again
    assert not leader.is_leading()


async def test_verify_after_a_refused_write_steps_down_if_the_lease_moved() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    assert await elector.verify()
    server.edit(*LEASES, NS, NAME, {"spec": {"holderIdentity": "other", "leaseTransitions": 1}})
    assert elector.is_leading()  # its own clock cannot know
    assert not await elector.verify()
    assert not elector.is_leading()


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"), [(10, 10, 2), (15, 10, 10), (15, 10, 0), (5, 10, 2)]
)
def test_timings_that_could_let_two_leaders_act_are_refused(
    duration: float, deadline: float, retry: float
) -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        ElectionConfig(NS, NAME, duration, deadline, retry)


async def test_a_leader_whose_lease_is_deleted_stops_leading_before_it_creates_another() -> None:
    server, clock = FakeApiServer(), Clock()
    server.put(lease("me", 5))
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    assert (elector.is_leading(), elector.token) == (True, 5)
    server.remove(*LEASES, NS, NAME)
    gate = asyncio.Event()
    server.hold("POST", LEASE_PATH.rsplit("/", 1)[0], gate)
    clock.now = 2
    creating = asyncio.create_task(elector.tick())
    await eventually(lambda: server.held == 1)
    assert not elector.is_leading()  # token 5 means nothing now: no write may carry it
    gate.set()
    await creating
    assert (elector.is_leading(), elector.token) == (True, 6)


async def test_each_bad_value_of_the_lease_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = FakeApiServer(), Clock()
    server.put(lease("other", 2, leaseDurationSeconds="soon"))
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    with caplog.at_level(logging.WARNING, logger="cronlease.shell.leadership"):
        for instant in (0, 2, 4):
            clock.now = instant
            await elector.tick()
        server.edit(*LEASES, NS, NAME, {"spec": {"leaseDurationSeconds": "later"}})
        for instant in (6, 8):
            clock.now = instant
            await elector.tick()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert "'soon'" in warnings[0]
    assert "'later'" in warnings[1]


async def test_verify_refuses_a_count_that_is_no_number() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    server.edit(*LEASES, NS, NAME, {"spec": {"leaseTransitions": "0x"}})
    assert not await elector.verify()
    assert not elector.is_leading()


@pytest.mark.parametrize(
    ("duration", "deadline", "written"),
    [(15, 10, 15), (10.4, 10, 11), (10.5, 10, 11), (10.0001, 10, 11), (2.2, 2.1, 3)],
)
async def test_the_duration_on_the_wire_is_rounded_up_above_the_renew_deadline(
    duration: float, deadline: float, written: int
) -> None:
    server, clock = FakeApiServer(), Clock()
    config = ElectionConfig(NS, NAME, duration, deadline, retry_period=1)
    elector = LeaseElector(KubeApi(server), "me", config, clock)
    await elector.tick()  # creates the Lease
    await elector.tick()  # renews it
    stored = server.get(*LEASES, NS, NAME)
    assert stored is not None
    assert stored["spec"]["leaseDurationSeconds"] == written
    assert stored["spec"]["leaseDurationSeconds"] > deadline


@pytest.mark.parametrize(
    ("duration", "deadline", "retry"),
    [
        (math.inf, 10, 2),
        (math.nan, 10, 2),
        (15, math.nan, 2),
        (15, 10, math.nan),
        (15, 10, -math.inf),
        (1e10, 10, 2),  # more seconds than the Lease's int32 can say
    ],
)
def test_timings_that_are_no_finite_seconds_are_refused(
    duration: float, deadline: float, retry: float
) -> None:
    with pytest.raises(ValueError, match=r"finite|2\^31|retry period < renew deadline"):
        ElectionConfig(NS, NAME, duration, deadline, retry)


async def test_a_lease_at_the_largest_token_does_not_lock_everyone_out() -> None:
    """leaseTransitions is an int32: one more than its maximum is refused by the API server on
    every write, so a new holder keeps the maximum (the fence tells holders apart by name)."""
    server, clock = FakeApiServer(), Clock()
    server.put(lease("other", 2**31 - 1))
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    clock.now = 16  # the other holder's lease has expired
    await elector.tick()
    assert (elector.is_leading(), elector.token) == (True, 2**31 - 1)


# A standby that watches the Lease (cronlease.shell.electorthread.lease_watch feeds observe()).


async def test_a_renewal_the_watch_delivered_is_dated_on_its_arrival_not_at_the_next_read() -> None:
    server, clock = FakeApiServer(), Clock()
    server.put(lease("other", 2))
    standby = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await standby.tick()  # clock 0: the Lease as it was
    renewed = lease("other", 2, renew="2026-01-05T09:00:10.000000Z")
    server.edit(*LEASES, NS, NAME, {"spec": renewed["spec"]})
    clock.now = 10
    standby.observe(renewed)  # its event arrives as it happens
    clock.now = 24.9
    await standby.tick()
    assert not standby.is_leading()
    clock.now = 25.1  # 15 s after the event; a first read now would wait 15 s more
    await standby.tick()
    assert (standby.is_leading(), standby.token) == (True, 3)
    assert server.calls == [GET, GET, GET, PUT]


async def test_a_standby_looks_again_when_the_lease_it_saw_expires_not_a_retry_period_later() -> (
    None
):
    server, clock = FakeApiServer(), Clock()
    server.put(lease("other", 2))
    standby = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await standby.tick()
    assert standby.next_round_in() == CONFIG.retry_period
    clock.now = 14.5
    assert standby.next_round_in() == pytest.approx(0.5)
    clock.now = 16
    assert standby.next_round_in() == 0


async def test_our_own_renewals_arriving_by_the_watch_do_not_make_another_round() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    stored = server.get(*LEASES, NS, NAME)
    assert stored is not None
    elector.observe(stored)
    assert not elector._poke.is_set()  # a round per renewal would renew in a tight loop
    elector.observe(lease("", stored["spec"]["leaseTransitions"]))
    assert elector._poke.is_set()  # released: look at once


async def test_a_leaders_next_round_counts_from_the_start_of_its_last() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    # A round that began at 5 and ended at 6.5 (a burst on the API server): the next one
    # starts 2 s after 5, not 2 s after 6.5, which would leave it 1.5 s less before the deadline.
    clock.now = 6.5
    assert elector.next_round_in(began=5) == pytest.approx(0.5)
    clock.now = 8
    assert elector.next_round_in(began=5) == 0  # slower than a retry period: at once
    assert elector.next_round_in() == CONFIG.retry_period


async def test_a_renewal_that_meets_a_foreign_write_reads_the_lease_in_the_same_round() -> None:
    server, clock = FakeApiServer(), Clock()
    elector = LeaseElector(KubeApi(server), "me", CONFIG, clock)
    await elector.tick()
    server.edit(*LEASES, NS, NAME, {"spec": {"holderIdentity": "other", "leaseTransitions": 1}})
    clock.now = 2
    await elector.tick()
    # Its one-PUT renewal is refused (409: the resourceVersion moved), and the read that
    # follows shows the new holder, valid on our clock: no write carries our token now.
    assert server.calls == [GET, POST, PUT, GET]
    assert not elector.is_leading()


async def test_a_conflict_in_a_round_makes_the_next_round_at_once() -> None:
    """A free Lease whose taking meets a 409 (somebody else wrote first) is read again at once,
    not a retry period later: the poke the conflict sets outlives the round it was set in."""
    server = FakeApiServer()
    server.put(lease("", 4))
    server.fail("PUT", LEASE_PATH, 409)
    elector = LeaseElector(KubeApi(server), "me", CONFIG)
    loop = asyncio.create_task(elector.run())
    try:
        # Well within the 2 s retry period: GET, the refused PUT, then GET and PUT again.
        await eventually(elector.is_leading, deadline=CONFIG.retry_period / 2)
    finally:
        await elector.release()
        await loop
    assert server.calls[:4] == [GET, PUT, GET, PUT]
