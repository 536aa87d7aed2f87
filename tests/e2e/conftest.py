"""e2e wiring: one control plane per test session, reached through pytest-kubernetes.

By default the session uses our own control plane (started if needed, through the external
provider); `--k8s-provider=kind` makes pytest-kubernetes create a kind cluster instead, and kwok is
started against it to play the fake node, so the same tests run where Docker exists.
"""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster import Cluster, ensure_cluster, start_kwok, stop_cluster
from devcluster.cluster import create_fake_node
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.processes import stop
from devcluster.replica import OperatorProcess
from kube import Kube, wait_for


@pytest.fixture(scope="session")
def k8s_cluster(request: pytest.FixtureRequest, k8s_manager: Any) -> Iterator[Any]:
    """The session's cluster as a pytest-kubernetes manager (its .kubeconfig is a Path)."""
    provider = request.config.getoption("k8s_provider") or "external"
    if provider == "external":
        kubeconfig = request.config.getoption("k8s_kubeconfig")
        ours: Cluster | None = None
        if not kubeconfig:
            ours = ensure_cluster()
            kubeconfig = ours.kubeconfig
        manager = k8s_manager("external")(kubeconfig=Path(kubeconfig))
        manager.create()
        yield manager
        if ours is not None and not ours.reused:
            stop_cluster()
        return
    manager = k8s_manager(provider)("cronlease-e2e")
    manager.create(timeout=300)
    log_dir = Path(manager.kubeconfig).parent
    kwok_pid = start_kwok(Path(manager.kubeconfig), log_dir)
    try:
        create_fake_node(Path(manager.kubeconfig))
        yield manager
    finally:
        stop(kwok_pid, "kwok")
        manager.delete()


@pytest.fixture(scope="session")
def kube(k8s_cluster: Any) -> Kube:
    """kubectl as cluster admin."""
    return Kube(Path(k8s_cluster.kubeconfig))


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test, with its default ServiceAccount in place; deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.run("create", "namespace", name)
    wait_for(lambda: kube.get("serviceaccount", "default", name), 30, "the default ServiceAccount")
    yield name
    with contextlib.suppress(Exception):
        kube.run("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="session")
def crd(k8s_cluster: Any, kube: Kube) -> str:
    """cronlease installed with its Helm chart: the CRD (Established), RBAC, the fencing policy."""
    install_chart(Path(k8s_cluster.kubeconfig))
    wait_for(
        lambda: kube.run("get", "scheduledjobs", "-A", check=False).returncode == 0,
        30,
        "the scheduledjobs resource to be served",
    )
    return "scheduledjobs.cronlease.io"


@pytest.fixture(scope="session")
def operator_kubeconfig(
    crd: str, k8s_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Credentials of the chart's ServiceAccount: every operator in the suite runs with these."""
    path = Path(tmp_path_factory.mktemp("sa")) / "kubeconfig"
    return service_account_kubeconfig(Path(k8s_cluster.kubeconfig), path)


@pytest.fixture(scope="session")
def operator_process(
    operator_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the session, as a separate process; tests may stop and restart it."""
    process = OperatorProcess(operator_kubeconfig, Path(tmp_path_factory.mktemp("operator")))
    process.start()
    yield process
    process.stop()


@pytest.fixture
def operator(operator_process: OperatorProcess) -> OperatorProcess:
    """The session's operator, running at the start of the test (restarted if a test stopped it)."""
    if not operator_process.running:
        operator_process.start()
    return operator_process


@pytest.fixture
def started(operator_process: OperatorProcess) -> Iterator[list[OperatorProcess]]:
    """Replicas a test starts and appends here (the session's operator is stopped meanwhile);
    afterwards each is resumed if paused, and stopped."""
    operator_process.stop()
    processes: list[OperatorProcess] = []
    yield processes
    for replica in processes:
        if replica.process is not None:
            replica.send(signal.SIGCONT)
        replica.stop()
