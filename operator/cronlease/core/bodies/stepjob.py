"""A multi-step Run's step Jobs and heartbeat Leases: built for an attempt, read back from the
API (issue 17).

A step Job is named from (run, step, action, attempt), so that a repeated creation of one
attempt collides; it is owned by its Run and labelled with the run, the step, the action and the
attempt, and never with cronlease.io/scheduledjob: the ScheduledJob's decisions see only the Run.
It holds the slot-record finalizer until the Run's status has settled its attempt, so that no
deletion can make an attempt vanish before the supervisor has recorded what became of it.
"""

from __future__ import annotations

import copy
import hashlib
from datetime import datetime
from typing import Any

from cronlease.core.bodies.jobtemplate import without_ours
from cronlease.core.bodies.runenv import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_IDEMPOTENCY_KEY,
    ANNOTATION_RUN,
    with_run_environment,
)
from cronlease.core.bodies.runenv import ENVIRONMENT as RUN_ENVIRONMENT
from cronlease.core.decide.supervision import DEFAULT_GRACE, Action, StepJob
from cronlease.core.names.jobinfo import job_info
from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    FINALIZER_SLOT_RECORD,
    GROUP,
    LABEL_ATTEMPT,
    LABEL_RUN,
    RUN_KIND,
    VERSION,
    micro_time,
)
from cronlease.core.specs.steps import Step

LABEL_STEP = f"{GROUP}/step"
# The garbage collector's finalizer of a foreground deletion: the object stays until its
# dependents (a Job's pods) are gone.
FOREGROUND_DELETION = "foregroundDeletion"
MAX_GRACE = 86_400
LABEL_ACTION = f"{GROUP}/action"
ANNOTATION_STEP = f"{GROUP}/step"
ANNOTATION_HEARTBEAT_LEASE = f"{GROUP}/heartbeat-lease"
STEP_ENVIRONMENT = {
    **RUN_ENVIRONMENT,
    "CRONLEASE_STEP": ANNOTATION_STEP,
    "CRONLEASE_HEARTBEAT_LEASE": ANNOTATION_HEARTBEAT_LEASE,
}


# A step Job's name is at most this long, so that "<name>-" is the whole prefix of its pods'
# names: the API server cuts a generateName to 58 characters, and the heartbeat policy tells an
# attempt's pods by that prefix.
MAX_STEP_JOB_NAME = 57


def step_job_name(owner: str, run: str, step: str, action: Action, attempt: int) -> str:
    """`<scheduledjob>-s<digest>`, the ScheduledJob's name cut to fit MAX_STEP_JOB_NAME (the
    digest of the run's full name, the step, the action and the attempt keeps it unique)."""
    digest = _digest(run, step, action, attempt)
    return f"{owner[: MAX_STEP_JOB_NAME - len(digest) - 2]}-s{digest}"


def _digest(run: str, step: str, action: Action, attempt: int) -> str:
    return hashlib.sha256(f"{run}/{step}/{action.value}/{attempt}".encode()).hexdigest()[:9]


def step_idempotency_key(run_key: str, step: str) -> str:
    """The same for every attempt of the step in this run (and its replays' ), different for
    every step: the app commits its effect under it, once."""
    return hashlib.sha256(f"{run_key}\x00{step}".encode()).hexdigest()[:32]


def build_step_job(
    run: dict[str, Any],
    step: Step,
    action: Action,
    attempt: int,
    leader: str,
    fencing_token: int,
) -> dict[str, Any]:
    metadata, spec = run["metadata"], run["spec"]
    owner = str(spec["scheduledJob"])
    name = step_job_name(owner, metadata["name"], step.name, action, attempt)
    source = (
        step.compensate.job_template if step.compensate and action is Action.COMPENSATE else None
    )
    template = copy.deepcopy(source or step.job_template)
    theirs = template.get("metadata") or {}
    labels = {
        **without_ours(theirs.get("labels")),
        LABEL_RUN: metadata["name"],
        LABEL_STEP: step.name,
        LABEL_ACTION: action.value,
        LABEL_ATTEMPT: str(attempt),
    }
    run_annotations = metadata.get("annotations") or {}
    annotations = {
        **without_ours(theirs.get("annotations")),
        ANNOTATION_SCHEDULED_AT: run_annotations.get(ANNOTATION_SCHEDULED_AT, ""),
        ANNOTATION_TRIGGER: run_annotations.get(ANNOTATION_TRIGGER, ""),
        ANNOTATION_LEADER: leader,
        ANNOTATION_FENCING_TOKEN: str(fencing_token),
    }
    job_spec = template.get("spec") or {}
    if step.timeout_seconds and action is Action.RUN:
        job_spec["activeDeadlineSeconds"] = step.timeout_seconds  # the step's complete-by
    pod_annotations = {
        ANNOTATION_SCHEDULED_AT: annotations[ANNOTATION_SCHEDULED_AT],
        ANNOTATION_RUN: metadata["name"],
        ANNOTATION_ATTEMPT: str(attempt),
        ANNOTATION_TRIGGER: annotations[ANNOTATION_TRIGGER],
        ANNOTATION_IDEMPOTENCY_KEY: step_idempotency_key(
            str(spec.get("idempotencyKey", "")), f"{step.name}/{action.value}"
        ),
        ANNOTATION_STEP: step.name,
        ANNOTATION_HEARTBEAT_LEASE: name if step.heartbeat_seconds and action is Action.RUN else "",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": labels,
            "annotations": annotations,
            "finalizers": [FINALIZER_SLOT_RECORD],
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": RUN_KIND,
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": with_run_environment(job_spec, pod_annotations, STEP_ENVIRONMENT),
    }


def build_heartbeat_lease(
    namespace: str, job: StepJob, seconds: int, since: datetime
) -> dict[str, Any]:
    """The attempt's own Lease, named as its Job and owned by it (gone with it): its pod renews
    it; a stale attempt can renew only its own, which the supervisor never reads. It starts
    renewed at `since`, the attempt's claim, so that a Lease made again (a user deleted it)
    never extends the attempt's time to its first heartbeat."""
    stamp = micro_time(since)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": job.name,
            "namespace": namespace,
            "labels": {LABEL_RUN: job.run, LABEL_STEP: job.step, LABEL_ATTEMPT: str(job.attempt)},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job.uid}
            ],
        },
        "spec": {
            "holderIdentity": job.name,
            "leaseDurationSeconds": seconds,
            "acquireTime": stamp,
            "renewTime": stamp,
        },
    }


def step_job_info(job: dict[str, Any]) -> StepJob:
    """A step Job read totally: a Job that lacks what the leader writes is untrusted, and never
    counts as an attempt. What makes it an attempt is what only the leader can write (the
    fencing policy's writer rule): its labels, its annotations and its name. Its owner reference
    is not: a user may remove it (orphaning), and the attempt still runs; a Run controller of
    another name or uid makes it another run's."""
    info = job_info(job)
    metadata = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    assert isinstance(metadata, dict)
    labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    assert isinstance(labels, dict)
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, dict) else {}
    run_uid, run_name = _run_owner(metadata)
    step, run = str(labels.get(LABEL_STEP, "")), str(labels.get(LABEL_RUN, ""))
    action_text, attempt_text = labels.get(LABEL_ACTION), str(labels.get(LABEL_ATTEMPT, ""))
    action = Action(action_text) if action_text in set(Action) else Action.RUN
    attempt = int(attempt_text) if attempt_text.isascii() and attempt_text.isdigit() else 0
    trusted = (
        bool(run)
        and (not run_uid or run == run_name)
        and bool(step)
        and action_text in set(Action)
        and attempt >= 1
        and bool(annotations.get(ANNOTATION_LEADER))
        and str(annotations.get(ANNOTATION_FENCING_TOKEN, "")).isdigit()
        and info.name.endswith(f"-s{_digest(run, step, action, attempt)}")
    )
    return StepJob(
        name=info.name,
        uid=info.uid,
        run_uid=run_uid,
        run=run,
        step=step,
        action=action,
        attempt=attempt,
        state=info.state,
        finished_at=info.finished_at,
        failure_reason=info.failure_reason,
        deleting=info.deleting,
        held=info.held,
        trusted=trusted,
        foreground=info.deleting and _finalizer(metadata, FOREGROUND_DELETION),
        grace=_grace(job),
    )


def _grace(job: dict[str, Any]) -> int:
    """Its pods' terminationGracePeriodSeconds, read totally (a day at most)."""
    spec = job.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    pod = template.get("spec") if isinstance(template, dict) else None
    grace = pod.get("terminationGracePeriodSeconds") if isinstance(pod, dict) else None
    return min(grace, MAX_GRACE) if type(grace) is int and grace >= 0 else DEFAULT_GRACE


def _finalizer(metadata: dict[str, Any], name: str) -> bool:
    finalizers = metadata.get("finalizers")
    return isinstance(finalizers, list) and name in finalizers


def _run_owner(metadata: dict[str, Any]) -> tuple[str, str]:
    """(uid, name) of the Run that controls the Job; ("", "") if no Run does."""
    refs = metadata.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        if ref.get("kind") == RUN_KIND and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/"):
            return str(ref.get("uid", "")), str(ref.get("name", ""))
        return "", ""
    return "", ""
