"""Real pods (issue 37): the chart's operator and a step's pods run as real containers on a real
node, as users run them. On the dev control plane, `devcluster` starts the node (containerd,
runc, a kubelet) for this module and takes it down after; on any other cluster (kind, with the
image loaded: `make e2e-cluster`) its own nodes run them.

The chart is installed with its defaults but for the image: 2 replicas, their probes, the
ServiceAccount's in-cluster login, the PodDisruptionBudget and the fence. ScheduledJobs' own
pods stay on kwok's node (their template tolerates its taint)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_steps import stepper, the_run

from devcluster import image, node
from devcluster.cluster import Cluster, cluster_dir, ensure_node, stop_node
from devcluster.install import install_chart
from devcluster.replica import OPERATOR_NAMESPACE, RELEASE, OperatorProcess
from kube import (
    Kube,
    assert_each_slot_once,
    holder,
    jobs_of,
    parse_time,
    scheduledjob,
    takeover_seconds,
    wait_for,
)

SELECTOR = f"app.kubernetes.io/name=cronlease,app.kubernetes.io/instance={RELEASE}"
DEPLOYMENT = f"deployment/{RELEASE}"
PYTHON = "/usr/bin/python3.11"  # the operator's image has no shell: its Python runs the steps


def ours(kubeconfig: Path) -> bool:
    """Whether the session runs on the dev control plane (which has no real node of its own)."""
    cluster = Cluster.load(cluster_dir())
    return cluster is not None and cluster.kubeconfig.resolve() == kubeconfig.resolve()


@pytest.fixture(scope="module")
def chart(kube: Kube, crd: str, operator_process: OperatorProcess) -> Iterator[str]:
    """The chart with its defaults but the image, on a real node; the session's operator (a host
    process of the same release) is stopped meanwhile. Yields the image."""
    local = ours(kube.kubeconfig)
    if local:
        why = node.unavailable()
        if why:
            pytest.skip(f"no real node on this machine: {why}")
        ensure_node([image.build()])
    operator_process.stop()
    reference = f"cronlease:{image.version()}"
    install_chart(
        kube.kubeconfig, "--set", "replicaCount=2",
        "--set", "image.repository=cronlease", "--set", f"image.tag={image.version()}",
    )  # fmt: skip
    try:
        rollout(kube)
        yield reference
    finally:
        install_chart(kube.kubeconfig)  # replicaCount=0: the operator on the host again
        kube.run(
            "wait", "--for=delete", "pods", "-l", SELECTOR, "-n", OPERATOR_NAMESPACE,
            "--timeout=60s", check=False,
        )  # fmt: skip
        if local:
            stop_node()


def rollout(kube: Kube) -> None:
    """The Deployment has all its replicas updated and Ready (through their probes)."""
    kube.run("rollout", "status", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "--timeout=180s")


def operator_pods(kube: Kube) -> list[dict[str, Any]]:
    pods = kube.items("pods", OPERATOR_NAMESPACE, SELECTOR)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def leader_pod(kube: Kube) -> str:
    """The pod whose replica holds the Lease (its identity is the pod's name and a suffix)."""

    def find() -> str | None:
        identity = holder(kube)
        names = [p["metadata"]["name"] for p in operator_pods(kube)]
        return next((n for n in names if identity.startswith(f"{n}-")), None)

    return wait_for(find, 60, "an operator pod to hold the Lease")


def every_second(kube: Kube, namespace: str, name: str = "tick") -> None:
    kube.apply(
        scheduledjob(
            name, namespace, schedule="* * * * * *",
            startingDeadlineSeconds=60, successfulJobsHistoryLimit=100,
        )
    )  # fmt: skip
    wait_for(lambda: len(jobs_of(kube, namespace, name)) >= 3, 30, "the first Jobs")


def test_the_chart_runs_on_the_real_node_ready_through_its_probes_one_leading(
    kube: Kube, namespace: str, chart: str
) -> None:
    print(kube.run("get", "pods", "-o", "wide", "-n", OPERATOR_NAMESPACE).stdout)
    pods = operator_pods(kube)
    assert len(pods) == 2
    assert all(is_ready(p) for p in pods)
    for pod in pods:
        spec = pod["spec"]
        main = spec["containers"][0]
        assert main["image"] == chart
        assert main.get("readinessProbe")
        assert main.get("livenessProbe")
        # The in-cluster login: the chart's ServiceAccount, its token mounted, no kubeconfig.
        assert spec["serviceAccountName"] == RELEASE
        assert "KUBECONFIG" not in {e["name"] for e in main.get("env") or []}
        assert main["securityContext"]["readOnlyRootFilesystem"] is True
        if ours(kube.kubeconfig):
            assert spec["nodeName"] == node.NODE_NAME
    leader = leader_pod(kube)
    every_second(kube, namespace)
    jobs = jobs_of(kube, namespace, "tick")
    assert {j["metadata"]["annotations"]["cronlease.io/leader"] for j in jobs} == {holder(kube)}
    assert holder(kube).startswith(f"{leader}-")
    assert_each_slot_once(jobs, 1)


def test_a_deleted_leader_pod_hands_over_with_one_job_per_slot(
    kube: Kube, namespace: str, chart: str
) -> None:
    every_second(kube, namespace)
    old = holder(kube)
    leader = leader_pod(kube)
    kube.run("delete", "pod", leader, "-n", OPERATOR_NAMESPACE, "--wait=false")
    seconds = takeover_seconds(kube, old, 30)
    print(f"a deleted leader pod: another replica led {seconds:.2f} s later")
    assert seconds < 5, seconds  # the deleted pod's SIGTERM releases the Lease
    new = holder(kube)
    wait_for(
        lambda: any(
            j["metadata"]["annotations"]["cronlease.io/leader"] == new
            for j in jobs_of(kube, namespace, "tick")
        ),
        15,
        "Jobs written by the new leader",
    )
    rollout(kube)  # the Deployment made its replacement, Ready again
    assert_each_slot_once(jobs_of(kube, namespace, "tick"), 1)


def test_a_rolling_restart_keeps_one_job_per_slot(kube: Kube, namespace: str, chart: str) -> None:
    every_second(kube, namespace)
    before = {p["metadata"]["name"] for p in operator_pods(kube)}
    old = holder(kube)
    kube.run("rollout", "restart", DEPLOYMENT, "-n", OPERATOR_NAMESPACE)
    wait_for(lambda: holder(kube) != old, 120, "the old leader to let go", 0.02)
    seconds = takeover_seconds(kube, old, 30)  # from its release (an empty holder) to the next
    print(f"a rolling restart: no replica led for {seconds:.2f} s")
    assert seconds < 5, seconds
    rollout(kube)
    assert not before & {p["metadata"]["name"] for p in operator_pods(kube)}
    leader = leader_pod(kube)
    wait_for(
        lambda: any(
            j["metadata"]["annotations"]["cronlease.io/leader"].startswith(f"{leader}-")
            for j in jobs_of(kube, namespace, "tick")
        ),
        15,
        "Jobs written by a replica of the new ReplicaSet",
    )
    assert_each_slot_once(jobs_of(kube, namespace, "tick"), 1)


def evict(kube: Kube, pod: str) -> subprocess.CompletedProcess[str]:
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": OPERATOR_NAMESPACE},
    }
    path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/pods/{pod}/eviction"
    return kube.run("create", "--raw", path, "-f", "-", stdin=json.dumps(body), check=False)


def test_the_disruption_budget_refuses_an_eviction_that_would_leave_no_replica(
    kube: Kube, chart: str
) -> None:
    rollout(kube)
    first, second = (p["metadata"]["name"] for p in operator_pods(kube))
    assert evict(kube, first).returncode == 0
    refused = evict(kube, second)  # its replacement is not Ready yet: 1 must stay available
    assert refused.returncode != 0
    assert "disruption budget" in refused.stderr, refused.stderr
    assert kube.get("pod", second, OPERATOR_NAMESPACE) is not None
    rollout(kube)


# --- step pods -----------------------------------------------------------------------------------


def real_step(reference: str, account: str, program: str, timeout: int) -> dict[str, Any]:
    """A step whose pod runs `program` in the operator's image, with the `cronlease heartbeat`
    sidecar as the README shows it."""
    return {
        "name": "work",
        "heartbeat": {"timeoutSeconds": timeout},
        "retry": {"maxAttempts": 2, "backoff": {"initialSeconds": 0}},
        "jobTemplate": {
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "serviceAccountName": account,
                        "initContainers": [
                            {
                                "name": "heartbeat",
                                "image": reference,
                                "args": ["heartbeat"],
                                "restartPolicy": "Always",
                            }
                        ],
                        "containers": [
                            {"name": "main", "image": reference, "command": [PYTHON, "-c", program]}
                        ],
                    }
                },
            }
        },
    }


def run_now(kube: Kube, namespace: str, step: dict[str, Any]) -> None:
    kube.apply(
        {
            "apiVersion": "cronlease.io/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {"name": "real", "namespace": namespace},
            "spec": {"runAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "steps": [step]},
        }
    )


def step_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """The pods of the run's step Jobs: the only pods in the test's namespace."""
    return kube.items("pods", namespace)


def job_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"]["batch.kubernetes.io/job-name"])


def attempt_of(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["annotations"]["cronlease.io/attempt"])


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    statuses = [
        *(pod["status"].get("initContainerStatuses") or []),
        *(pod["status"].get("containerStatuses") or []),
    ]
    return next(s for s in statuses if s["name"] == name)


PRINTS_ITS_VARIABLES = """
import json, os, time
print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("CRONLEASE_")}), flush=True)
time.sleep(12)
"""


def test_a_step_runs_in_a_real_pod_its_sidecar_renewing_and_ends_with_its_main_container(
    kube: Kube, namespace: str, chart: str
) -> None:
    """12 s of work under a 6 s heartbeat: only the sidecar's renewals keep it alive. When the
    main container exits, the sidecar ends on the kubelet's SIGTERM at once (not after the 30 s
    grace period), the Job ends within seconds, and the finished attempt is never restarted."""
    run_now(kube, namespace, real_step(chart, stepper(kube, namespace), PRINTS_ITS_VARIABLES, 6))
    renewals: set[str] = set()

    def running() -> dict[str, Any] | None:
        pods = [p for p in step_pods(kube, namespace) if p["status"].get("phase") == "Running"]
        for pod in pods:
            lease = kube.get("lease", job_of(pod), namespace) or {}
            renewals.add(str(lease.get("spec", {}).get("renewTime")))
        return pods[0] if pods else None

    wait_for(running, 60, "the step's pod Running")
    print(kube.run("get", "pods", "-o", "wide", "-n", namespace).stdout)

    def ended() -> dict[str, Any] | None:
        running()  # each poll also reads the Lease
        run = the_run(kube, namespace)
        return run if run and run["status"].get("phase") in ("Succeeded", "Failed") else None

    run = wait_for(ended, 90, "the run to end")
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert [s["attempt"] for s in run["status"]["steps"]] == [1]  # never restarted
    assert len(renewals - {"None"}) >= 3, renewals  # renewed while the main container ran

    (pod,) = step_pods(kube, namespace)
    main, sidecar = container(pod, "main"), container(pod, "heartbeat")
    assert sidecar["state"]["terminated"]["exitCode"] == 0  # SIGTERM handled, not SIGKILLed
    job = kube.get("job", job_of(pod), namespace)
    ended = parse_time(job["status"]["completionTime"])
    main_ended = parse_time(main["state"]["terminated"]["finishedAt"])
    print(
        f"the step Job ended {(ended - main_ended).total_seconds():.1f} s after its main container"
    )
    assert ended - main_ended <= timedelta(seconds=5)

    # What the program printed: the variables the pod was given.
    printed = json.loads(
        kube.run("logs", pod["metadata"]["name"], "-c", "main", "-n", namespace).stdout
    )
    assert printed["CRONLEASE_STEP"] == "work"
    assert printed["CRONLEASE_ATTEMPT"] == "1"
    assert printed["CRONLEASE_RUN"] == run["metadata"]["name"]
    assert printed["CRONLEASE_HEARTBEAT_LEASE"] == job["metadata"]["name"]
    assert len(printed["CRONLEASE_IDEMPOTENCY_KEY"]) == 32


HANGS_ON_ATTEMPT_1 = """
import os, time
if os.environ["CRONLEASE_ATTEMPT"] == "1":
    time.sleep(3600)
print("attempt", os.environ["CRONLEASE_ATTEMPT"], "done", flush=True)
"""


def freeze(pod: dict[str, Any], state: str) -> bool:
    """Freeze (or thaw) every process of a pod on the local node: its cgroup v1 freezer, where
    the kubelet put it. False if there is none to freeze here."""
    uid = pod["metadata"]["uid"]
    found = list(Path("/sys/fs/cgroup/freezer").glob(f"kubepods/**/pod{uid}/freezer.state"))
    for path in found:
        path.write_text(state)
    return bool(found)


def test_a_step_whose_pod_hangs_is_restarted_as_attempt_2_never_beside_it(
    kube: Kube, namespace: str, chart: str
) -> None:
    """A hung pod renews nothing: its attempt is abandoned for a lost heartbeat and attempt 2
    starts only once attempt 1's pod is gone. The whole pod hangs (frozen), sidecar included: a
    hang of the main container alone is what a step's timeoutSeconds bounds."""
    if not ours(kube.kubeconfig):
        pytest.skip("freezing a pod needs the dev control plane's local node")
    run_now(kube, namespace, real_step(chart, stepper(kube, namespace), HANGS_ON_ATTEMPT_1, 6))
    first = wait_for(
        lambda: next((p for p in step_pods(kube, namespace) if container_started(p)), None),
        60,
        "attempt 1's containers running",
    )
    assert freeze(first, "FROZEN")
    try:
        wait_for(
            lambda: 1 in abandoned(the_run(kube, namespace)),
            30,
            "attempt 1 abandoned for its lost heartbeat",
        )
    finally:
        freeze(first, "THAWED")
    most_alive = 0

    def ended() -> dict[str, Any] | None:
        nonlocal most_alive
        alive = [p for p in step_pods(kube, namespace) if p["status"].get("phase") in (
            "Pending", "Running")]  # fmt: skip
        most_alive = max(most_alive, len({attempt_of(p) for p in alive}))
        run = the_run(kube, namespace)
        return run if run and run["status"].get("phase") in ("Succeeded", "Failed") else None

    run = wait_for(ended, 120, "the run to end")
    assert run["status"]["phase"] == "Succeeded", run["status"]
    (entry,) = run["status"]["steps"]
    assert entry["attempt"] == 2
    assert entry["abandoned"] == [1]
    assert most_alive <= 1, "two attempts alive at once"


def abandoned(run: dict[str, Any] | None) -> list[int]:
    steps = ((run or {}).get("status") or {}).get("steps") or [{}]
    return list(steps[0].get("abandoned") or [])


def container_started(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("containerStatuses") or []
    return any(s["name"] == "main" and "running" in s.get("state", {}) for s in statuses)
