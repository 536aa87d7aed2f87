"""High availability: several operator replicas, one writer, fast failover, and a fence that the
API server enforces against a stale leader."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.replica import ELECTION, LEASE, OPERATOR_NAMESPACE, OperatorProcess
from kube import (
    Kube,
    KubectlError,
    jobs_of,
    pod_template,
    scheduled_at,
    scheduledjob,
    status_of,
    wait_for,
)


def lease(kube: Kube) -> dict[str, Any]:
    spec: dict[str, Any] = (kube.get("lease", LEASE, OPERATOR_NAMESPACE) or {}).get("spec") or {}
    return spec


def holder(kube: Kube) -> str:
    return str(lease(kube).get("holderIdentity") or "")


def leader_of(replicas: list[OperatorProcess], kube: Kube) -> OperatorProcess:
    def find() -> OperatorProcess | None:
        current = holder(kube)
        return next((r for r in replicas if r.running and r.identity() == current), None)

    return wait_for(find, 3 * ELECTION["lease_duration"], "a replica to hold the Lease")


def takeover_seconds(kube: Kube, old: str, deadline: float) -> float:
    """Seconds until the Lease names a holder other than `old` (polled as fast as kubectl goes)."""
    start = time.monotonic()
    wait_for(lambda: holder(kube) not in ("", old), deadline, "another replica to take over", 0.02)
    return time.monotonic() - start


def wait_for_runs_by(leader: OperatorProcess, kube: Kube, namespace: str) -> None:
    """A new leader is acting: a Job written by it appears within 10 s."""
    wait_for(
        lambda: any(
            j["metadata"]["annotations"]["cronlease.io/leader"] == leader.identity()
            for j in jobs_of(kube, namespace, "ha")
        ),
        10,
        f"runs under {leader.name}",
    )


@pytest.fixture
def replicas(
    operator_process: OperatorProcess, k8s_cluster: Any, tmp_path: Path
) -> Iterator[list[OperatorProcess]]:
    """Three replicas competing for the Lease (the session's operator is stopped meanwhile)."""
    operator_process.stop()
    started = [
        OperatorProcess(Path(k8s_cluster.kubeconfig), tmp_path, f"replica-{i}") for i in range(3)
    ]
    for replica in started:
        replica.start()
    yield started
    for replica in started:
        if replica.process is not None:
            replica.send(signal.SIGCONT)
        replica.stop()


def test_one_writer_failover_and_no_slot_lost_or_doubled(
    kube: Kube, namespace: str, replicas: list[OperatorProcess]
) -> None:
    kube.apply(
        scheduledjob(
            "ha",
            namespace,
            schedule="* * * * * *",
            startingDeadlineSeconds=30,
            successfulJobsHistoryLimit=100,
        )
    )
    first = leader_of(replicas, kube)
    wait_for(lambda: len(jobs_of(kube, namespace, "ha")) >= 3, 15, "runs under the first leader")
    # One writer: every Job so far was written by the Lease holder.
    writers = {
        j["metadata"]["annotations"]["cronlease.io/leader"] for j in jobs_of(kube, namespace, "ha")
    }
    assert writers == {first.identity()}

    # Crash: SIGKILL the leader; a standby takes over within leaseDuration + retryPeriod.
    first.stop(signal.SIGKILL)
    crash = takeover_seconds(kube, str(first.identity()), 20)
    assert crash <= ELECTION["lease_duration"] + ELECTION["retry_period"] + 0.5, crash
    second = leader_of(replicas, kube)
    wait_for_runs_by(second, kube, namespace)

    # Graceful stop: SIGTERM releases the Lease; the last standby takes over within retry + 1 s.
    second.stop(signal.SIGTERM)
    graceful = takeover_seconds(kube, str(second.identity()), 10)
    assert graceful <= ELECTION["retry_period"] + 1.0, graceful
    wait_for_runs_by(leader_of(replicas, kube), kube, namespace)

    # Across both handovers: every slot from the first to the last has exactly one Job.
    jobs = jobs_of(kube, namespace, "ha")
    slots = sorted(int(scheduled_at(job).timestamp()) for job in jobs)
    assert len(slots) == len(set(slots)), "a slot ran twice"
    missing = sorted(set(range(slots[0], slots[-1] + 1)) - set(slots))
    assert missing == [], f"slots lost across the failovers: {missing}"
    tokens = [
        int(j["metadata"]["annotations"]["cronlease.io/fencing-token"])
        for j in sorted(jobs, key=scheduled_at)
    ]
    assert tokens == sorted(tokens), "a Job from an older leader after a newer one"
    assert len(set(tokens)) == 3
    # The record agrees with the Jobs, each run counted once: stop new runs, then compare.
    kube.run(
        "patch", "sj", "ha", "-n", namespace, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    wait_for(
        lambda: status_of(kube, namespace, "ha").get("slotsSkipped", {}).get("Suspended"),
        10,
        "suspension",
    )
    assert status_of(kube, namespace, "ha")["runsCreated"] == len(jobs_of(kube, namespace, "ha"))
    print(f"\nfailover: SIGKILL {crash:.2f} s, SIGTERM {graceful:.2f} s")


def test_stale_leader_writes_are_refused_by_the_api_server(
    kube: Kube,
    namespace: str,
    replicas: list[OperatorProcess],
    tmp_path: Path,
    operator_kubeconfig: Path,
) -> None:
    # Replace the first replica by one that pauses between its leadership check and its create,
    # the window in which a GC pause or SIGSTOP makes a leader stale without knowing it.
    for replica in replicas:
        replica.stop()
    stale = OperatorProcess(operator_kubeconfig, tmp_path, "stale")
    stale.start("--test-hold-before-create=8")
    replicas.append(stale)
    wait_for(
        lambda: holder(kube) == stale.identity(),
        3 * ELECTION["lease_duration"],
        "the stale one to lead",
    )
    standby = replicas[1]
    standby.start()
    old_token = int(lease(kube).get("leaseTransitions") or 0)

    kube.apply(
        scheduledjob("fenced", namespace, schedule="*/2 * * * * *", startingDeadlineSeconds=30)
    )
    wait_for(
        lambda: "test hook: holding Job" in stale.log(), 10, "the leader to be about to create"
    )
    stale.send(signal.SIGSTOP)  # paused longer than its lease
    wait_for(
        lambda: holder(kube) == standby.identity(), 3 * ELECTION["lease_duration"], "a takeover"
    )
    assert int(lease(kube)["leaseTransitions"]) == old_token + 1
    stale.send(signal.SIGCONT)  # it wakes up and sends the create it was about to make

    wait_for(
        lambda: "write refused by the fencing policy" in stale.log(), 15, "the API server's refusal"
    )
    wait_for(lambda: "stopped leading" in stale.log(), 10, "the stale leader to step down")
    admitted = [
        j for j in jobs_of(kube, namespace, "fenced")
        if j["metadata"]["annotations"]["cronlease.io/leader"] == stale.identity()
    ]  # fmt: skip
    assert admitted == [], "a Job from the stale leader was admitted"
    assert "cronlease_fenced_writes_rejected_total 0.0" not in stale.metrics()
    # The new leader runs the slots, each once.
    wait_for(lambda: len(jobs_of(kube, namespace, "fenced")) >= 2, 15, "runs under the new leader")
    slots = [scheduled_at(j) for j in jobs_of(kube, namespace, "fenced")]
    assert len(slots) == len(set(slots))


def test_hand_made_job_with_a_stale_token_is_refused(kube: Kube, namespace: str, crd: str) -> None:
    def job(name: str, labels: dict[str, str], token: str) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "annotations": {
                    "cronlease.io/leader": "someone-else",
                    "cronlease.io/fencing-token": token,
                },
            },
            "spec": {"backoffLimit": 0, "template": pod_template()},
        }

    refused = kube.create(job("forged", {"cronlease.io/scheduledjob": "x"}, "999"), check=False)
    assert refused.returncode != 0
    assert "cronlease fencing" in refused.stderr, refused.stderr
    kube.create(job("unrelated", {"app": "other"}, "999"))  # no cronlease label: unaffected
    with pytest.raises(KubectlError):
        kube.run("get", "job", "forged", "-n", namespace)
    assert json.loads(kube.run("get", "job", "unrelated", "-n", namespace, "-o", "json").stdout)
