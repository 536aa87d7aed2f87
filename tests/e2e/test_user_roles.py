"""People with the built-in namespace roles use ScheduledJobs as they use CronJobs (issue 14,
item 2): the chart's aggregated ClusterRoles add them to `view`, `edit` and `admin`, and a
RoleBinding confines that to its namespace."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest

from kube import Kube, scheduledjob, wait_for

RUN_NOW = "cronlease.io/run-now"


def bind(kube: Kube, role: str, namespace: str) -> Kube:
    """kubectl as a user bound to the ClusterRole `role` in `namespace` only, once it grants
    reading ScheduledJobs there (for a built-in role: once the aggregation controller has added
    them)."""
    user = f"{role}-{namespace}"
    kube.run(
        "create", "rolebinding", f"{role}-user", f"--clusterrole={role}", f"--user={user}",
        "-n", namespace,
    )  # fmt: skip
    as_user = kube.as_user(user)
    wait_for(
        lambda: as_user.run("auth", "can-i", "get", "scheduledjobs.cronlease.io", "-n", namespace,
                            check=False).stdout.strip() == "yes",
        30,
        f"ScheduledJobs in the {role} role",
    )  # fmt: skip
    return as_user


def refused(result: subprocess.CompletedProcess[str]) -> bool:
    """Refused by authorization (not by the fence, not for any other reason)."""
    return result.returncode != 0 and "forbidden" in result.stderr.lower()


@pytest.fixture
def elsewhere(kube: Kube, namespace: str) -> Iterator[str]:
    """A second namespace, with a ScheduledJob of its own, where the user holds no role."""
    other = f"{namespace}-x"
    kube.run("create", "namespace", other)
    kube.create(scheduledjob("theirs", other, schedule="0 0 1 1 *"))
    yield other
    kube.run("delete", "namespace", other, "--wait=false", check=False)


def test_edit_creates_annotates_and_suspends_scheduledjobs_in_its_namespace_only(
    crd: str, kube: Kube, namespace: str, elsewhere: str
) -> None:
    editor = bind(kube, "edit", namespace)
    ours = json.dumps(scheduledjob("ours", namespace, schedule="0 0 1 1 *"))
    editor.run("create", "-f", "-", stdin=ours)
    editor.run("annotate", "scheduledjob", "ours", f"{RUN_NOW}=first", "-n", namespace)
    editor.run(
        "patch", "scheduledjob", "ours", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"suspend": true}}',
    )  # fmt: skip
    stored = kube.get("scheduledjob", "ours", namespace)
    assert stored is not None
    assert stored["metadata"]["annotations"][RUN_NOW] == "first"
    assert stored["spec"]["suspend"] is True
    assert editor.json("get", "scheduledjobs", "-n", namespace)["items"]
    # Status is the operator's: not in any user role.
    status = editor.run(
        "patch", "scheduledjob", "ours", "-n", namespace, "--subresource=status",
        "--type=merge", "-p", '{"status": {"runsCreated": 7}}', check=False,
    )  # fmt: skip
    assert refused(status), status.stderr
    editor.run("delete", "scheduledjob", "ours", "-n", namespace)

    theirs = json.dumps(scheduledjob("mine-too", elsewhere, schedule="0 0 1 1 *"))
    attempts: dict[str, Callable[[], subprocess.CompletedProcess[str]]] = {
        "create": lambda: editor.run("create", "-f", "-", stdin=theirs, check=False),
        "annotate": lambda: editor.run(
            "annotate", "scheduledjob", "theirs", f"{RUN_NOW}=x", "-n", elsewhere, check=False
        ),
        "suspend": lambda: editor.run(
            "patch",
            "scheduledjob",
            "theirs",
            "-n",
            elsewhere,
            "--type=merge",
            "-p",
            '{"spec": {"suspend": true}}',
            check=False,
        ),
        "list": lambda: editor.run("get", "scheduledjobs", "-n", elsewhere, check=False),
    }
    outcomes = {what: refused(attempt()) for what, attempt in attempts.items()}
    assert outcomes == dict.fromkeys(attempts, True)


def test_view_reads_but_does_not_write(crd: str, kube: Kube, namespace: str) -> None:
    kube.create(scheduledjob("watched", namespace, schedule="0 0 1 1 *"))
    viewer = bind(kube, "view", namespace)
    assert viewer.get("scheduledjob", "watched", namespace) is not None
    result = viewer.run(
        "patch", "scheduledjob", "watched", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"suspend": true}}', check=False,
    )  # fmt: skip
    assert refused(result), result.stderr


def test_a_runrequester_asks_for_runs_and_edits_no_scheduledjob(
    crd: str, kube: Kube, namespace: str
) -> None:
    """The chart's `<release>-runrequester`, bound in one namespace: RunRequests yes, the
    ScheduledJob's spec no; the request's status is the operator's alone (its fence)."""
    kube.create(scheduledjob("nightly", namespace, schedule="0 0 1 1 *"))
    oncall = bind(kube, "cronlease-runrequester", namespace)
    request = {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "RunRequest",
        "metadata": {"name": "again", "namespace": namespace},
        "spec": {"scheduledJobName": "nightly", "replay": {"deadLetters": True}},
    }
    oncall.run("create", "-f", "-", stdin=json.dumps(request))
    assert oncall.json("get", "runrequests", "-n", namespace)["items"]
    suspend = oncall.run(
        "patch", "scheduledjob", "nightly", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"suspend": true}}', check=False,
    )  # fmt: skip
    assert refused(suspend), suspend.stderr
    status = ["patch", "runrequest", "again", "-n", namespace, "--subresource=status",
              "--type=merge", "-p", '{"status": {"started": 5}}']  # fmt: skip
    assert refused(oncall.run(*status, check=False))
    forged = kube.run(*status, check=False)  # even the cluster's admin: the fence says no
    assert forged.returncode != 0
    assert "cronlease fencing" in forged.stderr, forged.stderr
    oncall.run("delete", "runrequest", "again", "-n", namespace)
