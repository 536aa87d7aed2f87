"""Exactly once against what users and other controllers do (issue 13), on the real control plane:
Jobs that vanish at once (TTL 0, history limit 0, users) across operator kills, a Job a user
orphans or corrupts, a runAt finer than milliseconds, the Lease deleted while leading, and a
namespace deleted once the operator is gone.

Each test records every Job the API server stored with a watch from before the ScheduledJob
exists, so "never two Jobs for one slot" is judged over the whole history, deleted Jobs included.
"""

from __future__ import annotations

import json
import signal
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devcluster import faultproxy
from devcluster.faultproxy import Rule
from devcluster.replica import LEASE, OPERATOR_NAMESPACE, RELEASE, OperatorProcess
from kube import (
    LABEL,
    Kube,
    Watch,
    condition,
    creation_time,
    is_active,
    jobs_of,
    parse_time,
    scheduledjob,
    status_of,
    wait_for,
    wait_until,
)

FINALIZER = "cronlease.io/slot-record"


def even_seconds(after: datetime, until: datetime) -> list[datetime]:
    """The slots of "*/2 * * * * *" in (after, until], by arithmetic (not the operator's cron)."""
    first = int(after.timestamp()) // 2 * 2 + 2
    return [datetime.fromtimestamp(t, UTC) for t in range(first, int(until.timestamp()) + 1, 2)]


def created(watch: Watch) -> dict[str, set[str]]:
    """Every Job name the watch saw stored, with the uids stored under it."""
    uids: dict[str, set[str]] = defaultdict(set)
    for event in watch.events():
        metadata = event["object"]["metadata"]
        uids[metadata["name"]].add(metadata["uid"])
    return uids


def assert_ledger(kube: Kube, namespace: str, name: str, watch: Watch) -> dict[str, Any]:
    """No name was ever stored twice; every slot up to the cursor is one run or one skip."""
    status = status_of(kube, namespace, name)
    history = created(watch)
    doubled = {job: uids for job, uids in history.items() if len(uids) > 1}
    assert not doubled, f"slots with two Jobs: {doubled}"
    since = creation_time(kube.get("scheduledjob", name, namespace))
    slots = even_seconds(since, parse_time(status["processedUntil"]))
    skipped = sum((status.get("slotsSkipped") or {}).values())
    assert status["runsCreated"] + skipped == len(slots), (status, len(slots))
    runs = {job for job in history if job.startswith(f"{name}-")}
    assert status["runsCreated"] <= len(runs), (status["runsCreated"], sorted(runs))
    return status


def test_jobs_that_vanish_at_once_never_run_their_slot_again(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """TTL 0 and history limit 0 delete each Job as soon as it finishes, a user deletes Jobs as
    they appear, and the operator is killed twice: no slot ever gets a second Job."""
    watch = Watch(kube, "jobs", namespace)
    sj = scheduledjob("vanish", namespace, schedule="*/2 * * * * *", successfulJobsHistoryLimit=0)
    sj["spec"]["jobTemplate"]["spec"]["ttlSecondsAfterFinished"] = 0
    kube.apply(sj)
    try:
        for _ in range(2):
            seen = len(created(watch))
            wait_for(lambda n=seen: len(created(watch)) >= n + 2, 20, "two more runs")
            kube.run("delete", "jobs", "-n", namespace, "-l", LABEL, "--wait=false")
            operator.stop(signal.SIGKILL)
            operator.start()
        seen = len(created(watch))
        wait_for(lambda: len(created(watch)) >= seen + 2, 20, "runs after the last restart")
        wait_for(
            lambda: status_of(kube, namespace, "vanish").get("runsCreated", 0) >= seen + 1,
            20,
            "the runs to be recorded",
        )
    finally:
        watch.stop()
    status = assert_ledger(kube, namespace, "vanish", watch)
    # What still holds the finalizer is a run the status does not record yet, never an old one.
    processed = parse_time(status["processedUntil"])
    for job in kube.items("jobs", namespace):
        if FINALIZER in (job["metadata"].get("finalizers") or []):
            slot = parse_time(job["metadata"]["annotations"]["cronlease.io/scheduled-at"])
            assert slot > processed - timedelta(seconds=4), job["metadata"]["name"]


def test_a_job_orphaned_by_a_user_leaves_its_scheduledjob(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 13: a user removed the ownerReference of a running Job to keep it for debugging;
    its Forbid ScheduledJob skipped every slot after, and Replace deleted the user's Job."""
    kube.apply(
        scheduledjob(
            "keep", namespace, duration="600s", schedule="*/2 * * * * *", concurrencyPolicy="Forbid"
        )
    )
    [first] = wait_for(lambda: jobs_of(kube, namespace, "keep"), 15, "a first run")
    name = first["metadata"]["name"]
    patch = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    kube.run("patch", "job", name, "-n", namespace, "--type=json", "-p", json.dumps(patch))
    wait_for(lambda: len(jobs_of(kube, namespace, "keep")) >= 2, 15, "a run after the orphaning")
    status = status_of(kube, namespace, "keep")
    assert name not in [ref["name"] for ref in status.get("active") or []]
    kept = kube.get("job", name, namespace)
    assert kept is not None
    assert is_active(kept), "the user's Job is left alone"
    assert not kept["metadata"].get("finalizers"), "nothing holds it from deletion"


def test_a_corrupted_job_affects_only_itself(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 13: a user set cronlease.io/scheduled-at on one Job to a value the operator cannot
    parse; the Job watch replayed it forever and every ScheduledJob everywhere stopped. Now the
    Job is untrusted and the rest goes on, across a restart (a fresh listing meets it too).
    The fence now refuses that edit from anyone but the operator's ServiceAccount
    (test_fence_scope.py), so the test writes it as that account, as a cluster admin can."""
    for name in ("mine", "theirs"):
        kube.apply(scheduledjob(name, namespace, schedule="*/2 * * * * *"))
    [first, second, *_] = wait_for(
        lambda: len(jobs := jobs_of(kube, namespace, "mine")) >= 2 and jobs, 15, "two runs"
    )
    job, relabelled = first["metadata"]["name"], second["metadata"]["name"]
    as_operator = kube.as_user(f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}")
    for corrupt in ("cronlease.io/scheduled-at=x", "cronlease.io/fencing-token=y"):
        as_operator.run("annotate", "job", job, "-n", namespace, "--overwrite", corrupt)
    as_operator.run(
        "label",
        "job",
        relabelled,
        "-n",
        namespace,
        "--overwrite",
        "cronlease.io/scheduledjob=nobody",
    )

    def runs(name: str) -> int:
        return int(status_of(kube, namespace, name).get("runsCreated", 0))

    for restart in (False, True):
        if restart:
            operator.stop()
            operator.start()
        before = {name: runs(name) for name in ("mine", "theirs")}
        for name, count in before.items():
            wait_for(lambda n=name, c=count: runs(n) >= c + 2, 20, f"{name} to keep running")
    assert kube.get("job", job, namespace) is not None, "the corrupted Job is not touched"


def test_a_run_at_finer_than_milliseconds_runs_once(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Issue 13: a runAt with more fractional digits than the operator writes was never covered
    by processedUntil: recorded again at every decision, and run again once its Job was gone."""
    watch = Watch(kube, "jobs", namespace)
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    text = run_at.strftime("%Y-%m-%dT%H:%M:%S") + ".123456789Z"
    kube.apply(scheduledjob("once", namespace, runAt=text))
    try:
        wait_for(
            lambda: (
                condition({"status": status_of(kube, namespace, "once")}, "Completed") == "True"
            ),
            20,
            "the one-off to complete",
        )
        kube.run("delete", "jobs", "-n", namespace, "-l", f"{LABEL}=once", "--wait=true")
        # A later one-off in the same namespace has run: the operator has had every chance to
        # decide on "once" again after its Job went.
        kube.apply(
            scheduledjob(
                "barrier", namespace, runAt=(datetime.now(UTC) + timedelta(seconds=1)).isoformat()
            )
        )
        wait_for(lambda: jobs_of(kube, namespace, "barrier"), 15, "the barrier's run")
    finally:
        watch.stop()
    status = status_of(kube, namespace, "once")
    assert status["runsCreated"] == 1, status
    assert status["processedUntil"] == run_at.strftime("%Y-%m-%dT%H:%M:%S") + ".123Z"
    assert [job for job in created(watch) if job.startswith("once-")] == [
        f"once-{int(run_at.timestamp())}"
    ]


def test_the_lease_deleted_while_leading_never_lowers_the_token(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Recreating the Lease used to restart the fencing token at 0. The leader stops, creates a
    Lease with a higher token, and runs on: its Jobs carry the new token, the fence accepts it."""
    kube.apply(scheduledjob("fenced", namespace, schedule="*/2 * * * * *"))
    wait_for(lambda: jobs_of(kube, namespace, "fenced"), 15, "a first run")
    lease = kube.get("lease", LEASE, OPERATOR_NAMESPACE)
    assert lease is not None
    token, uid = int(lease["spec"].get("leaseTransitions") or 0), lease["metadata"]["uid"]
    kube.run("delete", "lease", LEASE, "-n", OPERATOR_NAMESPACE)

    def recreated() -> dict[str, Any] | None:
        current = kube.get("lease", LEASE, OPERATOR_NAMESPACE)
        return current if current and current["metadata"]["uid"] != uid else None

    new = wait_for(recreated, 15, "the Lease to be recreated")
    assert int(new["spec"]["leaseTransitions"]) > token
    wait_for(
        lambda: any(
            int(job["metadata"]["annotations"]["cronlease.io/fencing-token"]) > token
            for job in jobs_of(kube, namespace, "fenced")
        ),
        20,
        "a run under the new token",
    )


def test_scheduledjobs_created_while_the_operator_is_down_are_caught_up_exactly(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Created with no operator running, they have no processedUntil: the first decision starts
    at their creation and accounts for every slot since, exactly once (run or skipped)."""
    watch = Watch(kube, "jobs", namespace)
    operator.stop()
    try:
        kube.apply(scheduledjob("newest", namespace, schedule="*/2 * * * * *"))
        kube.apply(
            scheduledjob("every", namespace, schedule="*/2 * * * * *", startingDeadlineSeconds=60)
        )
        wait_until(datetime.now(UTC) + timedelta(seconds=5))  # slots pass with nobody running
        restarted = datetime.now(UTC)
        operator.start()
        for name in ("newest", "every"):
            wait_for(
                lambda n=name: (
                    parse_time(
                        status_of(kube, namespace, n).get("processedUntil")
                        or "1970-01-01T00:00:00Z"
                    )
                    >= restarted
                ),
                20,
                f"{name} to catch up",
            )
    finally:
        watch.stop()
    newest = assert_ledger(kube, namespace, "newest", watch)
    assert newest["slotsSkipped"].get("Superseded", 0) >= 1, newest  # CronJob's rule
    every = assert_ledger(kube, namespace, "every", watch)
    assert not every.get("slotsSkipped"), every  # within the deadline: every missed slot ran


# Status writes held for 2 s: a stop always meets a Job that holds the finalizer.
SLOW_STATUS = Rule(
    "PATCH", r"/apis/cronlease\.io/v1alpha1/namespaces/[^/]+/scheduledjobs/[^/]+/status$",
    "delay", seconds=2.0,
)  # fmt: skip


def held(kube: Kube, namespace: str) -> list[str]:
    return [
        job["metadata"]["name"]
        for job in kube.items("jobs", namespace)
        if FINALIZER in (job["metadata"].get("finalizers") or [])
    ]


def test_namespace_deletion_completes_once_the_operator_is_gone(
    kube: Kube,
    namespace: str,
    operator: OperatorProcess,
    k8s_cluster: Any,
    operator_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """A graceful stop lets the reconciles in flight record their runs and release their Jobs
    (here while a status write is held): nothing is left holding the finalizer, so deleting the
    namespace once the operator is gone (an uninstall) never waits on it."""
    operator.stop()  # the session's operator: the proxied one below leads alone
    with faultproxy.running(
        Path(k8s_cluster.kubeconfig), operator_kubeconfig, [SLOW_STATUS], tmp_path
    ) as proxy:
        slow = OperatorProcess(proxy.kubeconfig, tmp_path, "slow")
        slow.start()
        try:
            kube.apply(scheduledjob("tidy", namespace, schedule="* * * * * *", duration="30s"))
            wait_for(lambda: held(kube, namespace), 20, "a run whose status write is held")
            slow.stop(signal.SIGTERM)
        finally:
            if slow.running:
                slow.stop(signal.SIGKILL)
    assert held(kube, namespace) == [], "a Job was left holding the finalizer"
    kube.run("delete", "namespace", namespace, "--wait=false")
    wait_for(
        lambda: kube.run("get", "namespace", namespace, check=False).returncode != 0,
        60,
        "the namespace to be deleted",
    )
