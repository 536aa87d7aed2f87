"""Without leader election, the start-up check for the fencing policy: only the policy's refusal
stops the operator; anything else that fails is logged and the operator starts."""

from __future__ import annotations

import pytest
from fakeapi import FakeApiServer

from cronlease.shell.fenceprobe import fencing_refusal
from cronlease.shell.kube import KubeApi

REFUSAL = (
    'jobs.batch "cronlease-fence-probe" is forbidden: ValidatingAdmissionPolicy '
    "'cronlease-fencing' with binding 'cronlease-fencing' denied request: cronlease fencing: "
    'write by "me" with token 0 refused; the Lease is held by "" with token 0'
)


async def test_the_policys_refusal_is_returned_and_nothing_is_created() -> None:
    server = FakeApiServer()
    server.fail("POST", r"/jobs$", 403, message=REFUSAL)
    assert await fencing_refusal(KubeApi(server), "team-a", "me", 0) == REFUSAL
    assert ("POST", "/apis/batch/v1/namespaces/team-a/jobs") in server.calls


async def test_an_unfenced_cluster_passes_and_the_probe_is_a_dry_run() -> None:
    server = FakeApiServer()
    assert await fencing_refusal(KubeApi(server), "team-a", "me", 0) is None
    assert server.items("batch/v1", "jobs", "team-a") == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (403, 'jobs.batch is forbidden: User "x" cannot create resource "jobs"'),  # RBAC
        (409, "already exists"),
        (500, "etcdserver: request timed out"),
    ],
)
async def test_other_failures_do_not_stop_the_operator(
    status: int, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = FakeApiServer()
    server.fail("POST", r"/jobs$", status, message=message)
    assert await fencing_refusal(KubeApi(server), "team-a", "me", 0) is None
    assert "could not check for the fencing policy" in caplog.text


async def test_a_lost_connection_does_not_stop_the_operator() -> None:
    server = FakeApiServer()
    server.lose("POST", r"/jobs$")
    assert await fencing_refusal(KubeApi(server), "team-a", "me", 0) is None
