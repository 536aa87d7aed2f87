"""The operator runs with the chart's ServiceAccount everywhere in this suite; here we show that
this identity can do what the operator needs and nothing it doesn't."""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.replica import LEASE, OPERATOR_NAMESPACE
from kube import Kube


@pytest.fixture
def as_operator(operator_kubeconfig: Path) -> Kube:
    return Kube(operator_kubeconfig)


def can(kube: Kube, *args: str) -> bool:
    result = kube.run("auth", "can-i", *args, check=False)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize(
    "needed",
    [
        ("create", "jobs.batch", "-n", "anywhere"),
        ("delete", "jobs.batch", "-n", "anywhere"),
        ("watch", "scheduledjobs.cronlease.io", "-A"),
        ("patch", "scheduledjobs.cronlease.io", "--subresource=status", "-n", "anywhere"),
        ("create", "events", "-n", "anywhere"),
        ("patch", "events", "-n", "anywhere"),
        ("get", "events", "-n", "anywhere"),
        # A Lease someone else made under a step attempt's name (its heartbeat's) is deleted.
        ("delete", "leases.coordination.k8s.io", "-n", "anywhere"),
        ("update", f"leases.coordination.k8s.io/{LEASE}", "-n", OPERATOR_NAMESPACE),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_operator_may_do_what_it_needs(as_operator: Kube, needed: tuple[str, ...]) -> None:
    assert can(as_operator, *needed)


@pytest.mark.parametrize(
    "unneeded",
    [
        ("get", "secrets", "-n", OPERATOR_NAMESPACE),
        ("delete", "pods", "-n", "default"),
        ("update", "scheduledjobs.cronlease.io", "-n", "default"),
        ("delete", "scheduledjobs.cronlease.io", "-n", "default"),
        ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system"),
        ("update", f"leases.coordination.k8s.io/{LEASE}", "-n", "default"),
        ("create", "clusterroles.rbac.authorization.k8s.io"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_operator_may_not_do_what_it_does_not_need(
    as_operator: Kube, unneeded: tuple[str, ...]
) -> None:
    assert not can(as_operator, *unneeded)


def test_reading_secrets_is_actually_forbidden(as_operator: Kube) -> None:
    result = as_operator.run("get", "secrets", "-n", OPERATOR_NAMESPACE, check=False)
    assert result.returncode != 0
    assert "forbidden" in result.stderr.lower()
    who = as_operator.json("auth", "whoami")["status"]["userInfo"]["username"]
    assert who == f"system:serviceaccount:{OPERATOR_NAMESPACE}:cronlease"
