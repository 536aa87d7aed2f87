"""`cronlease heartbeat` on the fake API server: it renews its Lease, and stops for good when
refused (the attempt is no longer current); a Lease that is gone is waited for; SIGTERM ends it
at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fakeapi import FakeApiServer

from cronlease.app.heartbeat import micro_time, parse_args, renew, renew_forever
from cronlease.shell.kube import LEASES, KubeApi

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


async def test_a_stop_renews_once_more_and_ends_the_renewals_at_once() -> None:
    """The kubelet's SIGTERM (the main container has exited) sets `stop`: one last renewal, so
    that the heartbeat counts from the pod's end, and no waiting out the hour-long interval."""
    server = FakeApiServer()
    lease_on(server, 3600)  # a renewal every 1,200 s
    stop = asyncio.Event()
    api = KubeApi(server)
    task = asyncio.create_task(renew_forever(api, "bank", "close-s1", lambda: NOW, stop=stop))
    while not server.calls:  # noqa: ASYNC110 - the fake server has no event to wait on
        await asyncio.sleep(0)
    stop.set()
    why = await asyncio.wait_for(task, 5)  # a guard: it returns at once
    assert "ending" in why
    assert [m for m, _ in server.calls] == ["PATCH", "PATCH"]


def test_sigterm_ends_the_sidecar_with_success(tmp_path: Path) -> None:
    """As a process (issue 37): SIGTERM ends `cronlease heartbeat` cleanly, even while its API
    is unreachable. Without a handler Python dies of the signal here, and as process 1 of a
    container it would ignore it, holding the step's pod for the whole grace period."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    source = Path(__file__).resolve().parents[3] / "operator"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(source)}
    command = [sys.executable, "-m", "cronlease", "heartbeat", "--lease", "s1", "-n", "bank"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    try:
        line = process.stderr.readline()  # its first failed renewal: the loop runs
        assert "renewing Lease bank/s1 failed" in line, line
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
    assert "the pod is ending" in process.stderr.read()
