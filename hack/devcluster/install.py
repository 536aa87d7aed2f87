"""Install cronlease's chart into a cluster and act as its ServiceAccount.

The operator under test runs as a local process, but with a token of the chart's ServiceAccount
(TokenRequest), so every e2e test also proves the chart's RBAC is enough, and least.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from devcluster.cluster import bin_dir, kubectl
from devcluster.replica import OPERATOR_NAMESPACE, RELEASE, REPO

CHART = REPO / "manifests" / "helm" / "cronlease"


def install_chart(
    kubeconfig: Path,
    *values: str,
    release: str = RELEASE,
    namespace: str = OPERATOR_NAMESPACE,
    chart: Path = CHART,
    take_ownership: bool = True,
) -> None:
    """helm upgrade --install; replicaCount=0 by default: the operator runs outside the cluster.
    Values not given are the chart's defaults, so installing again without them restores those.

    take_ownership: a long-lived dev cluster may hold the CRD that chart 0.1.0 installed from its
    crds/, which Helm refuses to adopt without --take-ownership (the upgrade the chart's README
    gives); a second release sets crds.enabled=false, so it never takes the first one's CRD."""
    command = [
        str(bin_dir() / "helm"), "upgrade", "--install", release, str(chart),
        "--kubeconfig", str(kubeconfig), "--namespace", namespace, "--create-namespace",
        *(["--take-ownership"] if take_ownership else []),
        "--set", "replicaCount=0", *values,
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"helm install failed: {result.stderr.strip()}")
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/scheduledjobs.cronlease.io", "crd/runrequests.cronlease.io")  # fmt: skip


def token_kubeconfig(kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the same cluster as `kubeconfig`, authenticated by a bearer token."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    context["context"]["user"] = "token"
    config["users"] = [{"name": "token", "user": {"token": token}}]
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def uninstall_chart(kubeconfig: Path, release: str, namespace: str) -> None:
    """helm uninstall (the CRD stays: the chart marks it helm.sh/resource-policy: keep)."""
    command = [
        str(bin_dir() / "helm"), "uninstall", release, "--kubeconfig", str(kubeconfig),
        "--namespace", namespace, "--wait",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"helm uninstall failed: {result.stderr.strip()}")


def service_account_kubeconfig(
    kubeconfig: Path,
    path: Path,
    duration: str = "24h",
    account: str = RELEASE,
    namespace: str = OPERATOR_NAMESPACE,
) -> Path:
    """A kubeconfig that acts as a release's ServiceAccount (the chart's by default), from a
    TokenRequest."""
    token = kubectl(
        kubeconfig, "create", "token", account, "-n", namespace, f"--duration={duration}"
    ).strip()
    return token_kubeconfig(kubeconfig, token, path)
