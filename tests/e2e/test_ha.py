"""High availability: several operator replicas, one writer, fast failover, and a fence that the
API server enforces against a stale leader."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devcluster import faultproxy
from devcluster.faultproxy import Rule
from devcluster.replica import ELECTION, OPERATOR_NAMESPACE, RELEASE, OperatorProcess
from kube import (
    Kube,
    KubectlError,
    assert_each_slot_once,
    holder,
    jobs_of,
    leader_of,
    lease,
    pod_template,
    scheduled_at,
    scheduledjob,
    status_of,
    takeover_seconds,
    wait_for,
    wait_for_runs_by,
)


def metric(replica: OperatorProcess, name: str) -> float:
    """One unlabelled sample from the replica's /metrics (0 if absent)."""
    for line in replica.metrics().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0


@pytest.fixture
def replicas(
    started: list[OperatorProcess], operator_kubeconfig: Path, tmp_path: Path
) -> list[OperatorProcess]:
    """Three replicas competing for the Lease, as the chart's ServiceAccount (the fence admits
    cronlease's writes from no one else)."""
    for i in range(3):
        started.append(OperatorProcess(operator_kubeconfig, tmp_path, f"replica-{i}"))
        started[-1].start()
    return started


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
    wait_for_runs_by(second, kube, namespace, "ha")

    # Graceful stop: SIGTERM releases the Lease; the last standby takes over within retry + 1 s.
    second.stop(signal.SIGTERM)
    graceful = takeover_seconds(kube, str(second.identity()), 10)
    assert graceful <= ELECTION["retry_period"] + 1.0, graceful
    wait_for_runs_by(leader_of(replicas, kube), kube, namespace, "ha")

    # Across both handovers: every slot from the first to the last has exactly one Job.
    jobs = jobs_of(kube, namespace, "ha")
    assert_each_slot_once(jobs, every=1)
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


# The stale leader's Job creates (not its dry-run template checks) are held in the fault proxy for
# longer than a takeover takes: SIGSTOP at the hold, lease expiry, the standby's acquisition.
HELD_CREATE = Rule(
    "POST",
    r"/apis/batch/v1/namespaces/[^/]+/jobs$",
    "delay",
    query=r"^(?!.*dryRun)",
    seconds=3 * ELECTION["lease_duration"],
)


def test_stale_leader_writes_are_refused_by_the_api_server(
    kube: Kube,
    namespace: str,
    started: list[OperatorProcess],
    k8s_cluster: Any,
    operator_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    # A leader whose create, sent while it led, reaches the API server only after it was paused
    # past its lease and another replica took over: the window in which a GC pause, SIGSTOP or a
    # slow network makes a leader stale without knowing it. Only the server's fence can stop it.
    with faultproxy.running(
        Path(k8s_cluster.kubeconfig), operator_kubeconfig, [HELD_CREATE], tmp_path
    ) as proxy:
        stale = OperatorProcess(proxy.kubeconfig, tmp_path, "stale")
        started.append(stale)
        stale.start()
        wait_for(
            lambda: holder(kube) == stale.identity(),
            3 * ELECTION["lease_duration"],
            "the stale one to lead",
        )
        standby = OperatorProcess(operator_kubeconfig, tmp_path, "standby")
        started.append(standby)
        standby.start()
        old_token = int(lease(kube).get("leaseTransitions") or 0)
        rejected_before = metric(stale, "cronlease_fenced_writes_rejected_total")

        kube.apply(
            scheduledjob(
                "fenced",
                namespace,
                schedule="*/2 * * * * *",
                startingDeadlineSeconds=30,
                successfulJobsHistoryLimit=100,  # every Job stays, to be audited
            )
        )
        wait_for(lambda: proxy.faults()[0]["held"], 15, "the leader's first create to be held")
        stale.send(signal.SIGSTOP)  # paused longer than its lease, its create on the way
        paused_at = datetime.now(UTC)
        wait_for(
            lambda: holder(kube) == standby.identity(),
            3 * ELECTION["lease_duration"],
            "a takeover",
        )
        token = int(lease(kube)["leaseTransitions"])
        assert token == old_token + 1
        assert proxy.faults()[0]["answers"] == {}, "the held create arrived before the takeover"

        # The held create reaches the API server now, with the old leader's token.
        answers = wait_for(
            lambda: proxy.faults()[0]["answers"], HELD_CREATE.seconds + 5, "the create to arrive"
        )
        assert answers == {"403": 1}, f"the stale create was not refused by the fence: {answers}"
        stale.send(signal.SIGCONT)  # it wakes up to the refusal and steps down
        wait_for(
            lambda: metric(stale, "cronlease_fenced_writes_rejected_total") > rejected_before,
            15,
            "the stale replica to count the refusal",
        )
        wait_for(lambda: metric(stale, "cronlease_leader") == 0.0, 15, "the stale one to step down")
        assert holder(kube) == standby.identity()

        # The new leader runs the slots, the one the stale leader tried among them, each once.
        wait_for(
            lambda: len(jobs_of(kube, namespace, "fenced")) >= 3, 15, "runs under the new leader"
        )
        stale.stop()  # before its proxy goes
    jobs = jobs_of(kube, namespace, "fenced")
    stale_jobs = [
        j["metadata"]["name"] for j in jobs
        if j["metadata"]["annotations"]["cronlease.io/leader"] == stale.identity()
        or int(j["metadata"]["annotations"]["cronlease.io/fencing-token"]) < token
    ]  # fmt: skip
    assert stale_jobs == [], "Jobs from the stale leader were admitted"
    slots = assert_each_slot_once(jobs, every=2)
    assert slots[0] <= paused_at.timestamp(), "the slot whose create was refused was never run"


def test_hand_made_job_with_a_stale_token_is_refused(kube: Kube, namespace: str, crd: str) -> None:
    """Written as the operator's own ServiceAccount, so that the token is what the fence judges
    (anyone else is refused whatever the token: test_fence_scope.py)."""
    as_operator = kube.as_user(f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}")

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

    refused = as_operator.create(
        job("forged", {"cronlease.io/scheduledjob": "x"}, "999"), check=False
    )
    assert refused.returncode != 0
    assert "cronlease fencing" in refused.stderr, refused.stderr
    assert 'write by "someone-else" with token 999 refused' in refused.stderr, refused.stderr
    as_operator.create(job("unrelated", {"app": "other"}, "999"))  # no cronlease label: unaffected
    with pytest.raises(KubectlError):
        kube.run("get", "job", "forged", "-n", namespace)
    assert json.loads(kube.run("get", "job", "unrelated", "-n", namespace, "-o", "json").stdout)


def test_without_leader_election_a_fenced_release_refuses_to_start(
    operator_kubeconfig: Path, tmp_path: Path
) -> None:
    """The chart's fencing policy refuses every write that lacks the Lease holder's token; a
    replica started with --no-leader-election says so and exits, instead of failing every slot."""
    replica = OperatorProcess(operator_kubeconfig, tmp_path, name="unelected")
    with pytest.raises(RuntimeError, match="exited at start"):
        replica.start("--no-leader-election")
    assert replica.process is not None
    assert replica.process.wait(timeout=10) == 78  # EX_CONFIG
    assert "the fencing policy is installed" in replica.log()
    assert "cronlease fencing:" in replica.log()  # the API server's own words
