"""The Jobs the operator builds, as a plain client can create them: the benches' reference for
what the operator's own Jobs cost the control plane, without the operator (bench/jobshape.py,
and bench/bench.py's raw create of our Jobs).

Two things differ from what the operator posts, neither in size nor structure: the fence lets
only the operator's ServiceAccount write cronlease.io keys, so they are renamed to keys of the
same length in another group (which the operator does not watch either); and the Jobs are owned
by a ConfigMap (any owner will do for the garbage collector), their slot-record finalizer left
out so that nothing has to release it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import orjson

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.bodies.runenv import CONTAINER_LISTS
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.names.naming import FINALIZER_SLOT_RECORD
from cronlease.shell.kube import KubeApi, resource_path

UNFENCED = re.compile(r"([\"'])cronlease\.io/")  # a key of ours, not kwok.cronlease.io's
ANNOTATION_PATH = "metadata.annotations['"  # a downward-API variable's fieldPath, up to the key
SLOT = datetime(2026, 12, 1, tzinfo=UTC)


async def operator_jobs(
    api: KubeApi, scheduledjob: dict[str, Any], count: int, literal: bool = False
) -> list[dict[str, Any]]:
    """`count` Jobs as the operator builds them for `scheduledjob` (a manifest, not yet
    created), under unique names, in its namespace, owned by a ConfigMap created there. With
    `literal`, the downward-API variables carry their values instead."""
    namespace = scheduledjob["metadata"]["namespace"]
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    stored = await api.request("POST", resource_path(("v1", "configmaps"), namespace), configmap)
    owner = orjson.loads(orjson.dumps(scheduledjob))
    owner["metadata"].update(
        uid=stored["metadata"]["uid"],
        creationTimestamp=stored["metadata"]["creationTimestamp"],
        generation=1,
        resourceVersion=stored["metadata"]["resourceVersion"],
    )
    view = ScheduledJobView.from_object(owner)
    jobs = [_unfenced(view, f"j-{index:05d}", literal) for index in range(count)]
    for job in jobs:
        job["metadata"]["ownerReferences"][0].update(
            apiVersion="v1", kind="ConfigMap", name="owner"
        )
    return jobs


def _unfenced(view: ScheduledJobView, name: str, literal: bool) -> dict[str, Any]:
    job = build_job(view, PlannedRun(name, SLOT, "Schedule"), "jobshape", 1)
    job["metadata"]["finalizers"] = [
        each for each in job["metadata"].get("finalizers", []) if each != FINALIZER_SLOT_RECORD
    ]
    unfenced: dict[str, Any] = orjson.loads(
        UNFENCED.sub(r"\1cronshape.io/", orjson.dumps(job).decode())
    )
    if literal:
        pod = unfenced["spec"]["template"]
        annotations = pod["metadata"]["annotations"]
        for list_name in CONTAINER_LISTS:
            for container in pod["spec"].get(list_name, []):
                container["env"] = [_literal(each, annotations) for each in container["env"]]
    return unfenced


def _literal(variable: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    path = ((variable.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
    if not path.startswith(ANNOTATION_PATH):
        return variable
    return {"name": variable["name"], "value": annotations[path[len(ANNOTATION_PATH) : -2]]}
