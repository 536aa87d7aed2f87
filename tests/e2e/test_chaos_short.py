"""The short variant of `make chaos`: every kind of fault once, against 3 replicas and 100
ScheduledJobs every 10 s, then the audit: nothing duplicated, nothing missing, no stale write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import cluster_dir
from devcluster.replica import REPO, OperatorProcess


def test_short_chaos_run_audits_clean(
    request: pytest.FixtureRequest,
    k8s_cluster: Any,
    crd: str,
    operator_process: OperatorProcess,
    tmp_path: Path,
) -> None:
    if Path(k8s_cluster.kubeconfig) != cluster_dir() / "kubeconfig":
        pytest.skip("chaos restarts kube-apiserver and etcd: it needs our own control plane")
    operator_process.stop()  # chaos runs its own three replicas
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'hack'}:{REPO / 'operator'}"}
    command = [sys.executable, str(REPO / "hack" / "chaos.py"), "--duration", "60"]
    command += ["--fault-every", "8", "--kubeconfig", str(k8s_cluster.kubeconfig)]
    command += ["--out", str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    report = (
        (tmp_path / "chaos-latest.md").read_text()
        if (tmp_path / "chaos-latest.md").exists()
        else ""
    )
    print(report)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    rows = dict(
        (cells[1].strip(), cells[2].strip())
        for line in report.splitlines()
        if line.startswith("| ") and len(cells := line.split("|")) > 3
    )
    assert int(rows["slots expected"]) >= 500
    assert rows["slots expected"] == rows["slots created"]
    for must_be_zero in ("duplicated", "missing without a reason", "stale-leader writes admitted"):
        assert rows[must_be_zero] == "0", (must_be_zero, report)
    for fault in (
        "SIGKILL leader",
        "SIGSTOP leader",
        "kube-apiserver",
        "etcd",
        "standby",
        "crash-looped",
    ):
        assert fault in report, fault
