"""A reduced run of `make bench` (N=5, one slot per controller), so the benchmark cannot rot."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from devcluster.processes import run_tool
from devcluster.replica import REPO, OperatorProcess

# Two phases, each waiting up to 70 s for its slot, then for the operator's rest (8 s), 30 s more
# for the settled RSS, and its namespace's deletion: 253 s on an idle cluster, and over the 300 s
# of pytest-timeout's default late in an e2e run (that is how it was killed once, its operator
# left running). The test's own limit is above BENCH_LIMIT, so the bench is stopped by run_tool,
# its operator with it, never killed by pytest-timeout.
BENCH_LIMIT = 420


@pytest.mark.timeout(BENCH_LIMIT + 60)
def test_bench_runs_end_to_end_and_reports(
    k8s_cluster: Any, crd: str, operator_process: OperatorProcess, tmp_path: Path
) -> None:
    operator_process.stop()  # the bench runs its own operator, and measures it
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'hack'}:{REPO / 'operator'}"}
    command = [
        sys.executable, str(REPO / "bench" / "bench.py"),
        "--n", "5", "--slots", "1", "--small-slots", "1",
        "--out", str(tmp_path), "--kubeconfig", str(k8s_cluster.kubeconfig),
    ]  # fmt: skip
    result = run_tool(command, env, timeout=BENCH_LIMIT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = (tmp_path / "latest.md").read_text()
    assert "| 5 | cronlease |" in report
    assert "| 5 | cronjob |" in report
    assert (tmp_path / "latest-lag-cdf.png").stat().st_size > 10_000
    data = json.loads((tmp_path / "latest.json").read_text())
    for controller in ("cronlease", "cronjob"):
        row = data["by_n"]["5"][controller]
        assert row["jobs"] == 5, row
        assert row["missing"] == 0, row
        assert 0 <= row["p50"] <= row["p99"] <= row["max"] < 30, row
    assert data["by_n"]["5"]["raw_jobs_per_s"] > 0
    assert data["by_n"]["5"]["cronlease"]["rest_rss_mb"] > 10
