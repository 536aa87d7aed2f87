"""The benches' reference Jobs (hack/operator_jobs.py): the operator's own Job for a ScheduledJob,
which a plain client may create past the fence, of the operator's size and structure."""

from __future__ import annotations

from typing import Any

import orjson
from fakeapi import FakeApiServer

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.names.naming import FINALIZER_SLOT_RECORD
from cronlease.shell.kube import KubeApi
from operator_jobs import SLOT, operator_jobs

SCHEDULEDJOB: dict[str, Any] = {
    "apiVersion": "cronlease.io/v1alpha1",
    "kind": "ScheduledJob",
    "metadata": {"name": "owner", "namespace": "bench-raw"},
    "spec": {
        "schedule": "* * * * *",
        "jobTemplate": {
            "metadata": {"labels": {"bench.cronlease.io/run": "r1"}},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                }
            },
        },
    },
}


def key_paths(value: Any, at: str = "") -> set[str]:
    """Every key's path, lists by position: the structure of a document."""
    if isinstance(value, dict):
        return {at} | {p for k, v in value.items() for p in key_paths(v, f"{at}/{k}")}
    if isinstance(value, list):
        return {at} | {p for i, v in enumerate(value) for p in key_paths(v, f"{at}/{i}")}
    return {at}


async def test_they_are_the_operators_jobs_with_no_key_the_fence_keeps_for_it() -> None:
    server = FakeApiServer()
    jobs = await operator_jobs(KubeApi(server), SCHEDULEDJOB, 3)
    assert [job["metadata"]["name"] for job in jobs] == ["j-00000", "j-00001", "j-00002"]
    (configmap,) = server.items("v1", "configmaps", "bench-raw")
    job = jobs[0]
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "ConfigMap",
        "owner",
        configmap["metadata"]["uid"],
        True,
    )
    text = orjson.dumps(job).decode()
    assert '"cronlease.io/' not in text  # the fence refuses these keys to anyone but the operator
    assert job["metadata"]["labels"]["bench.cronlease.io/run"] == "r1"  # the template's own
    # The operator's Job for the same slot, its slot-record finalizer aside, has the same keys
    # in the same places, under the other group.
    stored = configmap["metadata"]
    sj = orjson.loads(orjson.dumps(SCHEDULEDJOB))
    sj["metadata"] |= {"uid": stored["uid"], "creationTimestamp": stored["creationTimestamp"]}
    theirs = build_job(
        ScheduledJobView.from_object(sj), PlannedRun("j-00000", SLOT, "Schedule"), "jobshape", 1
    )
    assert theirs["metadata"].pop("finalizers") == [FINALIZER_SLOT_RECORD]
    assert FINALIZER_SLOT_RECORD not in job["metadata"].get("finalizers", [])
    renamed = orjson.dumps(theirs).decode().replace('"cronlease.io/', '"cronshape.io/')
    assert key_paths(job) - {"/metadata/finalizers"} == key_paths(orjson.loads(renamed))


async def test_literal_ones_carry_the_values_of_their_variables() -> None:
    (job,) = await operator_jobs(KubeApi(FakeApiServer()), SCHEDULEDJOB, 1, literal=True)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env
    assert all("value" in variable and "valueFrom" not in variable for variable in env)
