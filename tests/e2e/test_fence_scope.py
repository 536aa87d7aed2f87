"""The fence is scoped to its release (issue 13, item 4), on the real control plane.

Only the release's ServiceAccount writes what the operator trusts: a tenant with the built-in
`edit` role can neither forge a Job of the operator's (even with the current leader and token
copied from a real one) nor make a Job of their own look like one, while their ordinary Jobs,
their edits of unrelated keys, orphaning, and the garbage collector's updates stay allowed. And a
release fences only the namespaces it watches, so two releases with disjoint watchNamespaces run
side by side. No route around it (issue 33): not a Job's status, not a Run's update; and a step's
heartbeat Lease is made by the operator alone, and renewed only by the pods of its own Job.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devcluster.install import install_chart, service_account_kubeconfig, uninstall_chart
from devcluster.replica import OperatorProcess
from kube import (
    HEARTBEAT_ROLE,
    LABEL,
    OPERATOR,
    Kube,
    as_pod,
    can,
    condition,
    jobs_of,
    lease_call,
    pod_template,
    renewal,
    scheduledjob,
    service_account,
    status_of,
    step_lease,
    verdict,
    verdicts,
    wait_for,
)

FINALIZER = "cronlease.io/slot-record"
# The second release: its own name (so its own cluster-scoped objects), namespace and Lease.
OTHER_RELEASE, OTHER_NAMESPACE = "cronlease-b", "cronlease-b-system"
OTHER_LEASE = "cronlease-b-leader"
OTHER_OPERATOR = f"system:serviceaccount:{OTHER_NAMESPACE}:{OTHER_RELEASE}"


def job(
    namespace: str,
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    metadata.update(labels=labels or {}, annotations=annotations or {})
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"backoffLimit": 0, "template": pod_template()},
    }


def owner_of(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """A controller owner reference to the ScheduledJob, as the operator writes it."""
    obj = kube.get("scheduledjob", name, namespace)
    assert obj is not None
    return {
        "apiVersion": obj["apiVersion"],
        "kind": "ScheduledJob",
        "name": name,
        "uid": obj["metadata"]["uid"],
        "controller": True,
    }


def assert_refused(result: subprocess.CompletedProcess[str], who: str) -> None:
    """Refused by the fence, for the writer's identity (`who` is in the message)."""
    assert result.returncode != 0, f"admitted: {result.stdout}"
    assert "cronlease fencing:" in result.stderr, result.stderr
    assert who in result.stderr, result.stderr


@pytest.fixture
def tenant(kube: Kube, namespace: str) -> Kube:
    """A user bound to the built-in `edit` ClusterRole in the test's namespace, and nothing else."""
    user = f"tenant-{namespace}"
    kube.run(
        "create", "rolebinding", "tenant-edit", "--clusterrole=edit", f"--user={user}",
        "-n", namespace,
    )  # fmt: skip
    as_tenant = kube.as_user(user)
    wait_for(lambda: can(as_tenant, namespace, "create", "jobs"), 10, "the tenant's edit rights")
    return as_tenant


def test_a_tenant_cannot_forge_a_job_with_a_copied_token(
    kube: Kube, namespace: str, operator: OperatorProcess, tenant: Kube
) -> None:
    """The forgery the token check alone let through: a Job for a future slot that carries
    everything the operator trusts (owner, label, and the current leader and token, copied from
    a real run the tenant can read). Taken as that slot's run, it would have replaced it."""
    kube.apply(scheduledjob("real", namespace, schedule="*/2 * * * * *"))
    [real, *_] = wait_for(lambda: jobs_of(kube, namespace, "real"), 15, "a real run")
    slot = (int(datetime.now(UTC).timestamp()) + 600) // 2 * 2
    metadata = real["metadata"]
    forged = job(
        namespace,
        f"real-{slot}",
        labels=metadata["labels"],
        annotations={
            **metadata["annotations"],
            "cronlease.io/scheduled-at": datetime.fromtimestamp(slot, UTC).isoformat(),
        },
        owners=metadata["ownerReferences"],
    )
    assert_refused(tenant.create(forged, check=False), f"tenant-{namespace}")
    assert kube.get("job", f"real-{slot}", namespace) is None


def test_a_tenant_cannot_make_a_job_look_like_the_operators(
    kube: Kube, namespace: str, crd: str, tenant: Kube
) -> None:
    """Unlabelled Jobs that carry a ScheduledJob owner or cronlease annotations are refused too,
    and so is adding any of that to an existing Job; the tenant's ordinary Jobs and their edits
    of other keys are not."""
    kube.apply(scheduledjob("target", namespace, schedule="0 0 1 1 *", suspend=True))
    owner = owner_of(kube, namespace, "target")
    slot = {"cronlease.io/scheduled-at": "2030-01-01T00:00:00Z"}
    ordinary = job(namespace, "ordinary", {"app": "report"}, {"example.com/note": "mine"})

    def change(*args: str) -> subprocess.CompletedProcess[str]:
        return tenant.run(*args[:1], "job", "ordinary", *args[1:], "-n", namespace, check=False)

    outcomes = {
        "create with an owner": tenant.create(job(namespace, "a", owners=[owner]), check=False),
        "create with an annotation": tenant.create(
            job(namespace, "b", annotations=slot), check=False
        ),
        "create with the label": tenant.create(job(namespace, "c", {LABEL: "target"}), check=False),
        "create an ordinary Job": tenant.create(ordinary, check=False),
        "label it": change("label", "tier=batch"),
        "annotate it": change("annotate", "example.com/x=y"),
        "add the label": change("label", f"{LABEL}=target"),
        "add an annotation": change("annotate", "cronlease.io/leader=someone"),
        "add an owner": change(
            "patch", "--type=merge", "-p", json.dumps({"metadata": {"ownerReferences": [owner]}})
        ),
    }
    assert verdicts(outcomes) == {
        "create with an owner": "fenced",
        "create with an annotation": "fenced",
        "create with the label": "fenced",
        "create an ordinary Job": "admitted",
        "label it": "admitted",
        "annotate it": "admitted",
        "add the label": "fenced",
        "add an annotation": "fenced",
        "add an owner": "fenced",
    }
    for case, result in outcomes.items():
        if verdict(result) == "fenced":
            assert f'"tenant-{namespace}" may not' in result.stderr, (case, result.stderr)
    metadata = kube.get("job", "ordinary", namespace)["metadata"]
    assert metadata["labels"]["tier"] == "batch"
    assert not [key for key in metadata["labels"] if key.startswith("cronlease.io/")]
    assert not [key for key in metadata["annotations"] if key.startswith("cronlease.io/")]
    assert not metadata.get("ownerReferences")


def test_a_tenant_may_label_and_orphan_the_operators_jobs_but_not_move_them(
    kube: Kube, namespace: str, operator: OperatorProcess, tenant: Kube
) -> None:
    """Labels of their own and orphaning (issue 13: keeping a Job for debugging) stay allowed;
    moving a run to another slot is refused; the operator runs on and releases its finalizer."""
    kube.apply(scheduledjob("keep", namespace, schedule="*/2 * * * * *"))
    [first, *_] = wait_for(lambda: jobs_of(kube, namespace, "keep"), 15, "a first run")
    name = first["metadata"]["name"]

    def change(*args: str) -> subprocess.CompletedProcess[str]:
        return tenant.run(*args[:1], "job", name, *args[1:], "-n", namespace, check=False)

    orphan = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    outcomes = {
        "label it": change("label", "debug=true"),
        "move it": change(
            "annotate", "--overwrite", "cronlease.io/scheduled-at=2030-01-01T00:00:00Z"
        ),
        "orphan it": change("patch", "--type=json", "-p", json.dumps(orphan)),
    }
    assert verdicts(outcomes) == {
        "label it": "admitted",
        "move it": "fenced",
        "orphan it": "admitted",
    }
    wait_for(lambda: len(jobs_of(kube, namespace, "keep")) >= 3, 15, "runs after the orphaning")
    wait_for(
        lambda: not (kube.get("job", name, namespace) or {})["metadata"].get("finalizers"),
        15,
        "the orphaned Job's finalizer to be released",
    )


def test_a_job_held_for_its_record_keeps_its_label(
    kube: Kube, namespace: str, operator_process: OperatorProcess, tenant: Kube
) -> None:
    """A Job holds the slot-record finalizer until its run is recorded (a moment, or until a
    leader runs again after a crash), and a leader that starts cold finds it by its label: a
    tenant may orphan it, but may remove the label (or a cronlease annotation: its slot, its
    request's uid or index) only once it is released."""
    operator_process.stop()  # nothing records or releases it meanwhile; the next test restarts it
    kube.apply(scheduledjob("crashed", namespace, schedule="0 0 1 1 *", suspend=True))
    held = job(namespace, "crashed-1", owners=[owner_of(kube, namespace, "crashed")])
    held["metadata"]["finalizers"] = [FINALIZER]
    as_operator = kube.as_user(OPERATOR)
    as_operator.create(held)
    as_operator.run("label", "job", "crashed-1", f"{LABEL}=crashed", "-n", namespace)
    index = "cronlease.io/request-index"
    as_operator.run("annotate", "job", "crashed-1", f"{index}=0", "-n", namespace)

    def change(*args: str) -> subprocess.CompletedProcess[str]:
        return tenant.run(*args[:1], "job", "crashed-1", *args[1:], "-n", namespace, check=False)

    orphan = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    release = [{"op": "remove", "path": "/metadata/finalizers"}]
    try:
        outcomes = {
            "orphan it": change("patch", "--type=json", "-p", json.dumps(orphan)),
            "unlabel it": change("label", f"{LABEL}-"),
            "strip an annotation": change("annotate", f"{index}-"),
            "release it": change("patch", "--type=json", "-p", json.dumps(release)),
            "unlabel it once released": change("label", f"{LABEL}-"),
            "strip it once released": change("annotate", f"{index}-"),
        }
    finally:
        kube.run("patch", "job", "crashed-1", "-n", namespace, "--type=merge",
                 "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
    assert verdicts(outcomes) == {
        "orphan it": "admitted",
        "unlabel it": "fenced",
        "strip an annotation": "fenced",
        "release it": "admitted",
        "unlabel it once released": "admitted",
        "strip it once released": "admitted",
    }
    assert "slot-record" in outcomes["unlabel it"].stderr
    assert index in outcomes["strip an annotation"].stderr


def test_a_retried_attempt_keeps_its_mark(kube: Kube, namespace: str, tenant: Kube) -> None:
    """cronlease.io/retried says an attempt's successor was made. A tenant may delete the Job,
    or remove its other cronlease labels once it is released, but not that one: without it the
    attempt could pass for the latest failure of its run, and be retried again."""
    as_operator = kube.as_user(OPERATOR)
    as_operator.create(job(namespace, "nightly-1"))
    retried = "cronlease.io/retried"
    as_operator.run("label", "job", "nightly-1", f"{LABEL}=nightly", f"{retried}=true",
                    "-n", namespace)  # fmt: skip

    def change(*args: str) -> subprocess.CompletedProcess[str]:
        return tenant.run(*args[:1], "job", "nightly-1", *args[1:], "-n", namespace, check=False)

    outcomes = {
        "unmark it": change("label", f"{retried}-"),
        "unlabel it": change("label", f"{LABEL}-"),
        "delete it": change("delete", "--wait=false"),
    }
    assert verdicts(outcomes) == {
        "unmark it": "fenced",
        "unlabel it": "admitted",
        "delete it": "admitted",
    }
    assert "must never be again" in outcomes["unmark it"].stderr


def test_the_garbage_collector_orphans_the_operators_jobs(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Deleting a ScheduledJob with --cascade=orphan: the garbage collector removes the owner
    reference from each of its Jobs, and the operator releases their finalizers."""
    kube.apply(scheduledjob("gone", namespace, schedule="*/2 * * * * *"))
    wait_for(lambda: len(jobs_of(kube, namespace, "gone")) >= 2, 15, "two runs")
    kube.run("delete", "scheduledjob", "gone", "-n", namespace, "--cascade=orphan", "--wait=false")

    def left_alone() -> list[dict[str, Any]] | None:
        jobs = jobs_of(kube, namespace, "gone")
        done = all(
            not j["metadata"].get("ownerReferences")
            and FINALIZER not in (j["metadata"].get("finalizers") or [])
            for j in jobs
        )
        return jobs if done else None

    wait_for(left_alone, 20, "every Job orphaned by the garbage collector and released")


def test_only_the_operator_writes_scheduledjob_status(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Even a cluster admin's status write that names the current leader and token is refused:
    status is the operator's record of which slots ran."""
    kube.apply(scheduledjob("ledger", namespace, schedule="*/2 * * * * *"))

    def written() -> dict[str, Any] | None:
        status = status_of(kube, namespace, "ledger")
        return status if status.get("leader") and "fencingToken" in status else None

    status = wait_for(written, 15, "a status written by the operator")
    patch = {"status": {"leader": status["leader"], "fencingToken": status["fencingToken"]}}
    patch["status"]["runsCreated"] = 1000
    result = kube.run(
        "patch", "scheduledjob", "ledger", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", json.dumps(patch), check=False,
    )  # fmt: skip
    assert_refused(result, "writes the status of ScheduledJobs, RunRequests and Runs")
    assert status_of(kube, namespace, "ledger").get("runsCreated", 0) < 1000


def test_only_the_operator_creates_runs(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """A Run is a slot's record of a multi-step run: even a cluster admin cannot forge one, nor
    write its status (the supervisor's claims of step attempts)."""
    run = {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "Run",
        "metadata": {
            "name": "forged-29412000",
            "namespace": namespace,
            "labels": {"cronlease.io/scheduledjob": "forged"},
            "annotations": {"cronlease.io/leader": "someone", "cronlease.io/fencing-token": "9"},
        },
        "spec": {"scheduledJob": "forged", "steps": []},
    }
    result = kube.run("create", "-f", "-", stdin=json.dumps(run), check=False)
    assert_refused(result, "creates Runs")
    assert kube.items("runs", namespace) == []


def status_writer(kube: Kube, namespace: str) -> Kube:
    """A user who may create Jobs and write their status (a controller of someone else's, say),
    in the test's namespace only: what the API server keeps of a write through jobs/status is its
    metadata too, and the fence must judge it as it judges a write of the Job itself."""
    user = f"status-writer-{namespace}"
    kube.run("create", "role", "status-writer", "--verb=create,get,list,patch,update",
             "--resource=jobs,jobs/status", "-n", namespace)  # fmt: skip
    kube.run("create", "rolebinding", "status-writer", "--role=status-writer", f"--user={user}",
             "-n", namespace)  # fmt: skip
    as_writer = kube.as_user(user)
    wait_for(
        lambda: can(as_writer, namespace, "patch", "jobs", "--subresource=status"),
        10,
        "the writer's rights",
    )
    return as_writer


def test_a_jobs_status_is_no_side_door(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Finding 2 of issue 33: labels, annotations and owner references written through
    jobs/status are kept, so a plain Job could be made a future slot's run there (its template
    never run, its status saying it did), or a held or retried Job stripped of its label. The
    job controller writes that status all the time: a Job of the operator's, labelled, held and
    retried, still runs to completion."""
    operator.stop()  # nothing records or releases the held Job; the next test restarts it
    kube.apply(scheduledjob("target", namespace, schedule="0 0 1 1 *", suspend=True))
    owner = owner_of(kube, namespace, "target")
    held = job(namespace, "target-1", owners=[owner])
    held["metadata"]["finalizers"] = [FINALIZER]
    as_operator = kube.as_user(OPERATOR)
    as_operator.create(held)
    as_operator.run("label", "job", "target-1", f"{LABEL}=target", "cronlease.io/retried=true",
                    "-n", namespace)  # fmt: skip
    writer = status_writer(kube, namespace)
    plain = job(namespace, "plain")
    plain["spec"]["suspend"] = True
    writer.create(plain)

    def status(name: str, metadata: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        patch = json.dumps({"metadata": metadata})
        return writer.run("patch", "job", name, "-n", namespace, "--subresource=status",
                          "--type=merge", "-p", patch, check=False)  # fmt: skip

    try:
        outcomes = {
            "label it": status("plain", {"labels": {"tier": "batch"}}),
            "add the label": status("plain", {"labels": {LABEL: "target"}}),
            "add an annotation": status(
                "plain", {"annotations": {"cronlease.io/scheduled-at": "2030-01-01T00:00:00Z"}}
            ),
            "add an owner": status("plain", {"ownerReferences": [owner]}),
            "unlabel a held Job": status("target-1", {"labels": {LABEL: None}}),
            "unmark a retried Job": status("target-1", {"labels": {"cronlease.io/retried": None}}),
        }
        assert verdicts(outcomes) == {
            "label it": "admitted",
            "add the label": "fenced",
            "add an annotation": "fenced",
            "add an owner": "fenced",
            "unlabel a held Job": "fenced",
            "unmark a retried Job": "fenced",
        }
        metadata = kube.get("job", "plain", namespace)["metadata"]
        assert metadata["labels"]["tier"] == "batch"
        assert not [key for key in metadata["labels"] if key.startswith("cronlease.io/")]
        assert not metadata.get("ownerReferences")
        # The job controller's status writes (start, pods, completion) are all admitted.
        wait_for(
            lambda: condition(kube.get("job", "target-1", namespace), "Complete") == "True",
            30,
            "the held Job to run to completion",
        )
        labels = kube.get("job", "target-1", namespace)["metadata"]["labels"]
        assert labels[LABEL] == "target"
        assert labels["cronlease.io/retried"] == "true"
    finally:
        kube.run("patch", "job", "target-1", "-n", namespace, "--type=merge",
                 "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip


def test_a_run_is_neither_relabelled_nor_reowned(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """A Run's metadata is read as a Job's (its ScheduledJob, slot, leader and token): even a
    cluster admin may not change what cronlease wrote there, nor add to it; labels of their own
    and the garbage collector's orphaning stay allowed."""
    step = {
        "name": "only",
        "jobTemplate": {"spec": {"backoffLimit": 0, "template": pod_template("120s")}},
    }
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.apply({
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "close", "namespace": namespace},
        "spec": {"runAt": now, "steps": [step]},
    })  # fmt: skip
    kube.apply(scheduledjob("other", namespace, schedule="0 0 1 1 *", suspend=True))
    other = owner_of(kube, namespace, "other")
    [run] = wait_for(lambda: kube.items("runs", namespace), 30, "the slot's Run")
    name = run["metadata"]["name"]

    def change(*args: str) -> subprocess.CompletedProcess[str]:
        return kube.run(*args[:1], "run", name, *args[1:], "-n", namespace, check=False)

    relabel = json.dumps({"metadata": {"labels": {LABEL: "other"}}})
    outcomes = {
        "label it": change("label", "debug=true"),
        "relabel it": change("label", "--overwrite", f"{LABEL}=other"),
        "move it": change(
            "annotate", "--overwrite", "cronlease.io/scheduled-at=2030-01-01T00:00:00Z"
        ),
        "re-own it": change(
            "patch", "--type=merge", "-p", json.dumps({"metadata": {"ownerReferences": [other]}})
        ),
        "relabel it through its status": change(
            "patch", "--subresource=status", "--type=merge", "-p", relabel
        ),
    }
    assert verdicts(outcomes) == {
        "label it": "admitted",
        "relabel it": "fenced",
        "move it": "fenced",
        "re-own it": "fenced",
        "relabel it through its status": "fenced",
    }
    metadata = kube.get("run", name, namespace)["metadata"]
    assert metadata["labels"][LABEL] == "close"
    assert [ref["name"] for ref in metadata["ownerReferences"]] == ["close"]
    # The garbage collector removes the owner reference of an orphaned Run.
    kube.run("delete", "scheduledjob", "close", "-n", namespace, "--cascade=orphan", "--wait=false")
    wait_for(
        lambda: not (kube.get("run", name, namespace) or {})["metadata"].get("ownerReferences"),
        20,
        "the Run orphaned by the garbage collector",
    )


# Step heartbeat Leases (issue 33, finding 12)


def test_only_a_pod_of_the_leases_own_job_renews_it(kube: Kube, namespace: str, crd: str) -> None:
    """The pod of a step's Job is named as the Job (= its Lease), a dash, and the five characters
    the API server generates (an Indexed Job's: its index and a dash between); the name is cut to
    58 characters before those five, an Indexed Job's keeping its index. The pod of a Job whose
    name merely begins with the Lease's (a user's `<lease>-abc`) renews nothing."""
    service_account(kube, namespace, "stepper", HEARTBEAT_ROLE)  # the pods' account
    short, long = "close-s0a1b2c3d4", "a" * 46 + "-s0a1b2c3d4"  # the longest a step Job's name is
    as_operator = kube.as_user(OPERATOR)
    for name in (short, long):
        as_operator.create(step_lease(namespace, name))
    pods = {
        "its pod": (short, f"{short}-x7k2p"),
        "its Indexed pod": (short, f"{short}-0-x7k2p"),
        "its Indexed pod 12": (short, f"{short}-12-x7k2p"),
        "a pod of Job <lease>-abc": (short, f"{short}-abc-x7k2p"),
        "a pod with a longer suffix": (short, f"{short}-x7k2pq"),
        "a pod with a shorter suffix": (short, f"{short}-x7k2"),
        "a pod of index 01": (short, f"{short}-01-x7k2p"),
        "its pod, cut at 58": (long, f"{long}-x7k2p"),
        "its Indexed pod, cut at 58": (long, f"{long[:55]}-0-x7k2p"),
        "an Indexed pod not cut": (long, f"{long}-0-x7k2p"),
    }
    outcomes = {
        case: lease_call(
            as_pod(kube, namespace, pod), namespace, "patch", lease, "--type=merge", "-p", renewal()
        )
        for case, (lease, pod) in pods.items()
    }
    own = as_pod(kube, namespace, f"{short}-b4c5d")
    outcomes["its pod takes the Lease"] = lease_call(
        own, namespace, "patch", short, "--type=merge", "-p", '{"spec":{"holderIdentity":"me"}}'
    )
    assert verdicts(outcomes) == {
        "its pod": "admitted",
        "its Indexed pod": "admitted",
        "its Indexed pod 12": "admitted",
        "a pod of Job <lease>-abc": "fenced",
        "a pod with a longer suffix": "fenced",
        "a pod with a shorter suffix": "fenced",
        "a pod of index 01": "fenced",
        "its pod, cut at 58": "admitted",
        "its Indexed pod, cut at 58": "admitted",
        "an Indexed pod not cut": "fenced",
        "its pod takes the Lease": "fenced",
    }
    assert "may renew only its own attempt's Lease" in outcomes["a pod of Job <lease>-abc"].stderr
    assert "only its Lease's renewTime" in outcomes["its pod takes the Lease"].stderr


def test_a_tenant_neither_makes_nor_renews_a_step_lease(
    kube: Kube, namespace: str, crd: str, tenant: Kube, operator_kubeconfig: Path
) -> None:
    """Only the operator makes a step's heartbeat Lease (names are predictable: a Lease made
    ahead would be a future attempt's), and only it and the attempt's own pods change one: an
    editor who is no pod keeps no step alive. Deleting one stays allowed, as does a Lease of the
    editor's own under a step's name (the operator deletes it), and the garbage collector's
    orphaning and deletion."""
    as_operator = Kube(operator_kubeconfig)  # the chart's ServiceAccount: its RBAC, not admin's
    plain = job(namespace, "close-s0a1b2c3d4")
    plain["spec"]["suspend"] = True
    kube.create(plain)
    uid = kube.get("job", "close-s0a1b2c3d4", namespace)["metadata"]["uid"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "close-s0a1b2c3d4", "uid": uid}
    as_operator.create(step_lease(namespace, "close-s0a1b2c3d4", owner))
    as_operator.create(step_lease(namespace, "close-s1a1b2c3d4"))

    def lease(verb: str, *args: str) -> subprocess.CompletedProcess[str]:
        return lease_call(tenant, namespace, verb, "close-s0a1b2c3d4", *args)

    squat = step_lease(namespace, "close-s2a1b2c3d4")
    squat["metadata"]["labels"] = {}
    outcomes = {
        "make one": tenant.create(step_lease(namespace, "close-s3a1b2c3d4"), check=False),
        "make one unlabelled": tenant.create(squat, check=False),
        "label it": lease_call(
            tenant, namespace, "label", "close-s2a1b2c3d4", "cronlease.io/step=post"
        ),
        "renew one": lease("patch", "--type=merge", "-p", renewal()),
        "take one": lease("patch", "--type=merge", "-p", '{"spec":{"holderIdentity":"me"}}'),
        "unlabel one": lease("label", "cronlease.io/step-"),
        "annotate one": lease("annotate", "example.com/x=y"),
        "delete one": lease_call(
            tenant, namespace, "delete", "close-s1a1b2c3d4", "--cascade=foreground", "--wait=false"
        ),
        "the operator deletes the unlabelled one": lease_call(
            as_operator, namespace, "delete", "close-s2a1b2c3d4"
        ),
    }
    assert verdicts(outcomes) == {
        "make one": "fenced",
        "make one unlabelled": "admitted",
        "label it": "fenced",
        "renew one": "fenced",
        "take one": "fenced",
        "unlabel one": "fenced",
        "annotate one": "fenced",
        "delete one": "admitted",
        "the operator deletes the unlabelled one": "admitted",
    }
    assert f"tenant-{namespace}" in outcomes["renew one"].stderr
    # The garbage collector: the foreground deletion's finalizer goes, and the Lease with it;
    # a Job orphans its Lease.
    wait_for(
        lambda: kube.get("lease", "close-s1a1b2c3d4", namespace) is None,
        20,
        "the Lease deleted in the foreground to go",
    )
    kube.run("delete", "job", "close-s0a1b2c3d4", "-n", namespace, "--cascade=orphan")
    wait_for(
        lambda: (
            not kube.get("lease", "close-s0a1b2c3d4", namespace)["metadata"].get("ownerReferences")
        ),
        20,
        "the garbage collector to orphan the step Lease",
    )


# Two releases side by side


@contextlib.contextmanager
def scoped_releases(kube: Kube, kubeconfig: Path, first: str, second: str) -> Iterator[Path]:
    """The suite's release narrowed to `first`, and a second release for `second`, for the
    duration; yields the second release's ServiceAccount kubeconfig. Afterwards the second
    release is gone and the suite's release watches (and fences) all namespaces again."""
    try:
        install_chart(kubeconfig, "--set", f"watchNamespaces={{{first}}}")
        # The CRD is the suite's release's; without ownership taken, claiming anything of the
        # first release's fails the install.
        install_chart(
            kubeconfig, "--set", f"watchNamespaces={{{second}}}",
            "--set", f"leaderElection.leaseName={OTHER_LEASE}", "--set", "crds.enabled=false",
            release=OTHER_RELEASE, namespace=OTHER_NAMESPACE, take_ownership=False,
        )  # fmt: skip
        yield service_account_kubeconfig(
            kubeconfig, kubeconfig.parent / "other-release-sa.kubeconfig",
            account=OTHER_RELEASE, namespace=OTHER_NAMESPACE,
        )  # fmt: skip
    finally:
        with contextlib.suppress(Exception):
            uninstall_chart(kubeconfig, OTHER_RELEASE, OTHER_NAMESPACE)
        kube.run("delete", "namespace", OTHER_NAMESPACE, "--wait=false", check=False)
        install_chart(kubeconfig)


def test_two_releases_with_disjoint_namespaces_run_side_by_side(
    kube: Kube,
    namespace: str,
    k8s_cluster: Any,
    operator_process: OperatorProcess,
    operator_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """Each release's fence judges only the namespaces it watches: each operator runs its own
    ScheduledJob (Jobs created, status written), while a labelled Job that names the right leader
    and token is still refused from the other release's ServiceAccount."""
    other = f"{namespace}-b"
    kube.run("create", "namespace", other)
    wait_for(lambda: kube.get("serviceaccount", "default", other), 30, "the default ServiceAccount")
    operator_process.stop()  # it watches every namespace; the suite's next test restarts it
    replicas: list[OperatorProcess] = []
    try:
        with scoped_releases(kube, Path(k8s_cluster.kubeconfig), namespace, other) as other_sa:
            first = OperatorProcess(operator_kubeconfig, tmp_path, "release-a")
            first.start(f"--namespace={namespace}")
            replicas.append(first)
            second = OperatorProcess(other_sa, tmp_path, "release-b")
            replicas.append(second)
            second.start(
                f"--namespace={other}", f"--lease-namespace={OTHER_NAMESPACE}",
                f"--lease-name={OTHER_LEASE}",
            )  # fmt: skip
            for ns in (namespace, other):
                kube.apply(scheduledjob("tick", ns, schedule="*/2 * * * * *"))
            for ns, replica in ((namespace, first), (other, second)):
                wait_for(
                    lambda n=ns: int(status_of(kube, n, "tick").get("runsCreated", 0)) >= 2,
                    20,
                    f"two runs recorded in {ns}",
                )
                jobs = jobs_of(kube, ns, "tick")
                leaders = {j["metadata"]["annotations"]["cronlease.io/leader"] for j in jobs}
                assert leaders == {replica.identity()}, (ns, leaders)

            # Scoped, not open: in each release's namespace the other release's ServiceAccount
            # (given every RBAC right) cannot create a Job, even one with the right leader.
            for ns, stranger in ((namespace, OTHER_OPERATOR), (other, OPERATOR)):
                [real, *_] = jobs_of(kube, ns, "tick")
                forged = job(
                    ns, "forged", real["metadata"]["labels"], real["metadata"]["annotations"]
                )
                as_stranger = kube.as_user(stranger, "system:masters")
                assert_refused(as_stranger.create(forged, check=False), stranger)
    finally:
        for replica in replicas:
            replica.stop()
        kube.run("delete", "namespace", other, "--wait=false", check=False)
