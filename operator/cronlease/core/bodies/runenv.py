"""What a run's pods know of their run (issue 15, item 1): the slot, the run, the attempt, the
trigger and an idempotency key, as pod-template annotations and, through the downward API, as
environment variables of every container.

One source: the variables read the annotations, so what `kubectl get pod -o yaml` shows is what
the container sees. Variables of the same names in the user's template are replaced: these names
are the operator's, and a stale copy in a template would lie to the program about its run.
"""

from __future__ import annotations

import hashlib
from typing import Any

from cronlease.core.decide.decision import PlannedRun
from cronlease.core.names.naming import (
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    GROUP,
    format_time,
)

# The slot and the trigger keep the Job's own annotation names on the pod template.
ANNOTATION_RUN = f"{GROUP}/run"
ANNOTATION_ATTEMPT = f"{GROUP}/attempt"
ANNOTATION_IDEMPOTENCY_KEY = f"{GROUP}/idempotency-key"

ENVIRONMENT = {
    "CRONLEASE_SCHEDULED_AT": ANNOTATION_SCHEDULED_AT,
    "CRONLEASE_RUN": ANNOTATION_RUN,
    "CRONLEASE_ATTEMPT": ANNOTATION_ATTEMPT,
    "CRONLEASE_TRIGGER": ANNOTATION_TRIGGER,
    "CRONLEASE_IDEMPOTENCY_KEY": ANNOTATION_IDEMPOTENCY_KEY,
}
CONTAINER_LISTS = ("initContainers", "containers")


def idempotency_key(namespace: str, name: str, run: PlannedRun) -> str:
    """The same for every attempt and every replay of one slot of one ScheduledJob, and different
    for different slots; a run-now is its own unit of work, keyed by its token. Not the uid: a
    ScheduledJob deleted and applied again (a GitOps re-sync) is still the same work, and its
    slots' effects must not happen twice. A replay of a run-now keeps its token, so its key.
    Opaque (a digest), so nobody parses it."""
    unit = f"manual:{run.run_now_token}" if run.run_now_token else format_time(run.slot)
    digest = hashlib.sha256(f"{namespace}\x00{name}\x00{unit}".encode()).hexdigest()
    return digest[:32]


def run_annotations(namespace: str, name: str, run: PlannedRun, attempt: int = 1) -> dict[str, str]:
    return {
        ANNOTATION_SCHEDULED_AT: format_time(run.slot),
        ANNOTATION_RUN: run.run_name,
        ANNOTATION_ATTEMPT: str(attempt),
        ANNOTATION_TRIGGER: run.trigger,
        ANNOTATION_IDEMPOTENCY_KEY: idempotency_key(namespace, name, run),
    }


def with_run_environment(
    job_spec: dict[str, Any],
    annotations: dict[str, str],
    environment: dict[str, str] = ENVIRONMENT,
) -> dict[str, Any]:
    """The Job spec (a copy the caller owns) with the run's annotations on its pod template and
    the variables in every container and init container. Malformed parts of a template are left
    as they are: the API server refuses them, naming the user's field (the template's dry run)."""
    template = job_spec.get("template")
    if not isinstance(template, dict):
        return job_spec
    metadata = template.setdefault("metadata", {})
    if isinstance(metadata, dict):
        existing = metadata.get("annotations")
        kept = existing if isinstance(existing, dict) else {}
        metadata["annotations"] = {**kept, **annotations}
    pod = template.get("spec")
    if not isinstance(pod, dict):
        return job_spec
    for list_name in CONTAINER_LISTS:
        containers = pod.get(list_name)
        if not isinstance(containers, list):
            continue
        for container in containers:
            if isinstance(container, dict):
                container["env"] = _with_variables(container.get("env"), environment)
    return job_spec


def _with_variables(env: object, environment: dict[str, str]) -> object:
    """Ours first: the user's own variables may then build on them with $(CRONLEASE_...)."""
    ours = [
        {
            "name": variable,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{annotation}']"}},
        }
        for variable, annotation in environment.items()
    ]
    if env is None:
        return ours
    if not isinstance(env, list):
        return env  # malformed: the API server names the field
    theirs = [item for item in env if not _is_ours(item, environment)]
    return ours + theirs


def _is_ours(variable: object, environment: dict[str, str]) -> bool:
    return isinstance(variable, dict) and variable.get("name") in environment
