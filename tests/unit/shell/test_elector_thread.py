"""The elector on its own thread (cronlease.shell.electorthread), on the fake API server, in real
time: what it is for is that renewals go on while the operator's loop is busy, and that a standby
watching the Lease takes over the moment it is released."""

from __future__ import annotations

import asyncio
import time

from fakeapi import FakeApiServer
from harness import eventually
from prometheus_client import REGISTRY

from cronlease.shell.electorthread import ThreadedElector, lease_watch
from cronlease.shell.kube import LEASES, KubeApi
from cronlease.shell.leadership import ElectionConfig, LeaseElector

NS, NAME = "cronlease-system", "cronlease-leader"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
SHORT = ElectionConfig(NS, NAME, lease_duration=2, renew_deadline=1.5, retry_period=0.2)


async def test_renewals_go_on_while_the_operators_loop_is_busy() -> None:
    server = FakeApiServer()
    elector = ThreadedElector(lambda: KubeApi(server), "me", SHORT)
    running = asyncio.create_task(elector.run())
    await asyncio.wait_for(elector.wait_leading(), 5)
    renewals = server.calls.count(("PUT", LEASE_PATH))
    time.sleep(2.5)  # noqa: ASYNC251 (the point: a burst that keeps this loop from running)
    assert elector.is_leading()  # past the renew deadline, had the renewals waited for this loop
    assert server.calls.count(("PUT", LEASE_PATH)) >= renewals + 5
    await elector.release()
    await asyncio.wait_for(running, 5)
    stored = server.get(*LEASES, NS, NAME)
    assert stored is not None
    assert stored["spec"]["holderIdentity"] == ""


async def test_a_leader_steps_down_at_its_renew_deadline_without_being_asked() -> None:
    server = FakeApiServer()
    elector = ThreadedElector(lambda: KubeApi(server), "me", SHORT, watch=False)
    running = asyncio.create_task(elector.run())
    await asyncio.wait_for(elector.wait_leading(), 5)
    assert REGISTRY.get_sample_value("cronlease_leader") == 1
    for method in ("GET", "PUT"):  # no renewal succeeds from now on
        server.fail(method, LEASE_PATH, 500, times=10**6)
    # Nobody asks is_leading(): the gauge (and whoever waits for a change) learns it by itself.
    await eventually(lambda: REGISTRY.get_sample_value("cronlease_leader") == 0, deadline=5)
    assert not elector.is_leading()
    await elector.release()
    await asyncio.wait_for(running, 5)


async def test_a_watching_standby_takes_a_released_lease_at_once() -> None:
    server = FakeApiServer()
    slow = ElectionConfig(NS, NAME, lease_duration=60, renew_deadline=45, retry_period=30)
    leader = LeaseElector(KubeApi(server), "leader", slow)
    standby = LeaseElector(KubeApi(server), "standby", slow)
    await leader.tick()
    tasks = [
        asyncio.create_task(standby.run()),
        asyncio.create_task(lease_watch(KubeApi(server), standby).run()),
    ]
    await eventually(lambda: ("WATCH", LEASE_PATH.rsplit("/", 1)[0]) in server.calls)
    await leader.release()
    # Without the watch the standby would look again only after its 30 s retry period.
    await eventually(standby.is_leading, deadline=5)
    await standby.release()
    for task in tasks:
        task.cancel()
