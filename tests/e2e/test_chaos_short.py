"""The short variant of `make chaos`: every kind of fault once, against 3 replicas and 40
ScheduledJobs every 10 s (a fifth each with TTL 0, with no history, with the defaults, failing
chosen attempts under spec.retry, and multi-step), then the audit: nothing duplicated, nothing
missing, no stale write, no recorded slot's Job left held; no attempt twice, none skipped or
lost, none beyond maxAttempts, every run out of attempts a dead letter; no step attempt twice,
no finished step redone; meanwhile RunRequests (backfills, replays of dead letters, some
cancelled): one run per target, and every target of a Complete one run."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos_pods import MUST_BE_ZERO as PODS_MUST_BE_ZERO
from chaos_requests import MUST_BE_ZERO as REQUESTS_MUST_BE_ZERO
from chaos_steps import MUST_BE_ZERO as STEPS_MUST_BE_ZERO
from devcluster.cluster import cluster_dir
from devcluster.processes import run_tool
from devcluster.replica import REPO, OperatorProcess

CHAOS = REPO / "bench" / "chaos.py"
FAULT_KINDS = {
    "kill-leader",
    "pause-leader",
    "restart-apiserver",
    "restart-etcd",
    "kill-standby",
    "crash-loop",
    "user-deletes",
    "lease-latency",
    "step-meddling",
    "lost-deletes",
    "step-quota",
    "restart-all",
    "replay-twice",
    "delete-run",
}


# Fourteen faults, each with its own wait, take about five and a half minutes; then a quiet end,
# and up to REQUESTS_SETTLE for the RunRequests' last runs (under these faults,
# kube-controller-manager finishes a Job a minute or more after its 1 s pod).
CHAOS_LIMIT = 720


@pytest.mark.timeout(CHAOS_LIMIT + 60)
def test_short_chaos_run_audits_clean(
    k8s_cluster: Any, crd: str, operator_process: OperatorProcess, tmp_path: Path
) -> None:
    if Path(k8s_cluster.kubeconfig) != cluster_dir() / "kubeconfig":
        pytest.skip("chaos restarts kube-apiserver and etcd: it needs our own control plane")
    operator_process.stop()  # chaos runs its own three replicas
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'hack'}:{REPO / 'operator'}"}
    command = [sys.executable, str(CHAOS), "--duration", "60", "--fault-every", "8"]
    command += ["--kubeconfig", str(k8s_cluster.kubeconfig), "--out", str(tmp_path)]
    result = run_tool(command, env, timeout=CHAOS_LIMIT)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    assert result.returncode == 0, output
    record = json.loads((tmp_path / "chaos-latest.json").read_text())
    audit = record["audit"]
    assert audit["slots_expected"] >= 500, audit
    assert audit["slots_created"] == audit["slots_expected"], audit
    # The bench's own list of what must be 0 (slots, attempts, requests), each checked here.
    assert set(REQUESTS_MUST_BE_ZERO) <= set(record["must_be_zero"]), record["must_be_zero"]
    assert set(STEPS_MUST_BE_ZERO) <= set(record["must_be_zero"]), record["must_be_zero"]
    assert set(PODS_MUST_BE_ZERO) <= set(record["must_be_zero"]), record["must_be_zero"]
    for must_be_zero in record["must_be_zero"]:
        assert audit[must_be_zero] == 0, (must_be_zero, audit)
    assert record["failed"] == [], record["failed"]
    # An audit of a run whose faults hit nobody would prove nothing.
    applied = {fault["kind"] for fault in record["faults"] if fault["applied"]}
    assert applied == FAULT_KINDS, record["faults"]
    assert audit["leader_changes"] >= 1, audit
    assert audit["operator_restarts"] >= 1, audit
    # The user-deletes fault reached Jobs before their slots were recorded.
    assert audit["user_deletes_held"] >= 1, audit
    # lease-latency: creates the old leader sent reached the API server after a standby took the
    # Lease over (they are held 12 s, a takeover takes about 5), and the fence refused them.
    assert audit["held_creates_refused"] >= 1, (audit, record["faults"])
    populations = {"ttl-zero", "history-zero", "default", "retry", "steps"}
    assert set(audit["by_population"]) == populations, audit
    # Every way a run with retries ends was taken: success on attempts 2 and 3, a dead letter
    # after 3 attempts and after a final exit code, and a run ended by the user's deletion of
    # its failed attempt while it waited for the next.
    assert {"2", "3"} <= set(audit["succeeded_on_attempt"]), audit
    verdicts = audit["runs_by_verdict"]
    for verdict in (
        "dead-lettered",
        "dead-lettered (not retryable)",
        "cancelled: failed attempt deleted while the run waited",
    ):
        assert verdicts.get(verdict, 0) >= 1, (verdict, audit)
    # The faults on the leader hit runs between their attempts (kill-leader and pause-leader
    # wait for one), and the next attempts were made by the new leader.
    assert audit["runs_waiting_at_leader_fault"] >= 1, (audit, record["faults"])
    assert audit["next_attempt_by_new_leader"] >= 1, audit
    # RunRequests ran through the faults: at least one backfill and one replay of dead letters
    # reached Complete, every target with its one run (the must-be-zero figures above).
    assert audit["backfills_complete"] >= 1, audit
    assert audit["replays_complete"] >= 1, audit
    # Multi-step runs went through the faults: every step attempt accounted for (above), and
    # runs of them came to an end.
    assert audit["step_runs"] >= 10, audit
    assert audit["step_runs_by_phase"].get("Succeeded", 0) >= 1, audit
