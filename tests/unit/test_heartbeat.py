"""`cronlease heartbeat` on the fake API server: it renews its Lease, and stops for good when
refused (the attempt is no longer current); a Lease that is gone is waited for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fakeapi import FakeApiServer

from cronlease.heartbeat import micro_time, parse_args, renew, renew_forever
from cronlease.kube import LEASES, KubeApi

NOW = datetime(2026, 12, 1, 2, 0, 0, 123456, tzinfo=UTC)


def lease_on(server: FakeApiServer, seconds: int = 30) -> None:
    server.put(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "close-s1", "namespace": "bank"},
            "spec": {"holderIdentity": "close-s1", "leaseDurationSeconds": seconds},
        }
    )


async def test_a_renewal_moves_the_renew_time_and_paces_itself_by_the_duration() -> None:
    server = FakeApiServer()
    lease_on(server, 30)
    assert await renew(KubeApi(server), "bank", "close-s1", NOW) == 10.0
    lease = server.get(*LEASES, "bank", "close-s1")
    assert lease is not None
    assert lease["spec"]["renewTime"] == "2026-12-01T02:00:00.123456Z" == micro_time(NOW)


async def test_a_refusal_stops_the_renewals() -> None:
    server = FakeApiServer()
    lease_on(server)
    server.fail("PATCH", "/leases/close-s1", 403, "not yours", skip=1)
    why = await renew_forever(KubeApi(server), "bank", "close-s1", lambda: NOW, interval=0.001)
    assert "not yours" in why
    assert [m for m, _ in server.calls] == ["PATCH", "PATCH"]  # renewed once, then no more


async def test_a_passing_failure_is_retried() -> None:
    server = FakeApiServer()
    lease_on(server)
    server.fail("PATCH", "/leases/close-s1", 503, "busy")
    server.fail("PATCH", "/leases/close-s1", 403, "stop", skip=2)
    why = await renew_forever(KubeApi(server), "bank", "close-s1", lambda: NOW, interval=0.001)
    assert why.endswith("stop")


def test_it_needs_a_lease_to_renew(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONLEASE_HEARTBEAT_LEASE", raising=False)
    monkeypatch.setenv("POD_NAMESPACE", "bank")
    with pytest.raises(SystemExit):
        parse_args([])
    monkeypatch.setenv("CRONLEASE_HEARTBEAT_LEASE", "close-s1")
    assert parse_args([]).lease == "close-s1"


async def test_a_lease_not_made_yet_or_deleted_is_waited_for() -> None:
    """The operator creates the Lease right after the Job: the pod may start first. A Lease
    deleted after renewals (a user, issue 33) is made again by the supervisor: a healthy attempt
    goes on renewing it, and only a refusal stops it."""
    server = FakeApiServer()
    lease_on(server)
    server.fail("PATCH", "/leases/close-s1", 404, "not yet", times=2)
    server.fail("PATCH", "/leases/close-s1", 404, "deleted", skip=1, times=3)  # after a renewal
    server.fail("PATCH", "/leases/close-s1", 403, "stop")  # after the others
    why = await renew_forever(KubeApi(server), "bank", "close-s1", lambda: NOW, interval=0.001)
    assert why.endswith("stop")
    assert [m for m, _ in server.calls] == ["PATCH"] * 7  # renewed on through the deletion
