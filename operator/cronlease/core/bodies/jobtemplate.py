"""The Job a run creates: the user's template plus the labels, annotations and owner reference
that tie it to its ScheduledJob, its slot and the leader that wrote it."""

from __future__ import annotations

import copy
from typing import Any

from cronlease.core.bodies.runenv import run_annotations, with_run_environment
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_MAX_ATTEMPTS,
    ANNOTATION_REQUEST_INDEX,
    ANNOTATION_REQUEST_UID,
    ANNOTATION_RUN_NOW,
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    FINALIZER_SLOT_RECORD,
    GROUP,
    KIND,
    LABEL_ATTEMPT,
    LABEL_REQUEST,
    LABEL_RUN,
    LABEL_SCHEDULEDJOB,
    LABEL_TRIGGER,
    VERSION,
    format_time,
)

# A label value's limit: a longer one would have the API server refuse the Job.
MAX_LABEL_VALUE = 63


def build_job(
    sj: ScheduledJobView, run: PlannedRun, leader: str, fencing_token: int
) -> dict[str, Any]:
    template = copy.deepcopy(sj.spec.get("jobTemplate") or {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": run_metadata(sj, run, leader, fencing_token, template.get("metadata") or {}),
        "spec": with_run_environment(
            template.get("spec") or {}, run_annotations(sj.namespace, sj.name, run, run.attempt)
        ),
    }


def run_metadata(
    sj: ScheduledJobView,
    run: PlannedRun,
    leader: str,
    fencing_token: int,
    template_metadata: dict[str, Any],
) -> dict[str, Any]:
    """What ties a run's object (a Job, or a multi-step Run) to its ScheduledJob, its slot and the
    leader that wrote it: the metadata cronlease.core.names.jobinfo trusts."""
    labels = {
        **without_ours(template_metadata.get("labels")),
        LABEL_SCHEDULEDJOB: sj.name,
        LABEL_RUN: run.run_name,
        LABEL_ATTEMPT: str(run.attempt),
        LABEL_TRIGGER: run.trigger,
    }
    annotations = {
        **without_ours(template_metadata.get("annotations")),
        ANNOTATION_SCHEDULED_AT: format_time(run.slot),
        ANNOTATION_TRIGGER: run.trigger,
        ANNOTATION_LEADER: leader,
        ANNOTATION_FENCING_TOKEN: str(fencing_token),
    }
    if run.run_now_token is not None:
        annotations[ANNOTATION_RUN_NOW] = run.run_now_token
    if run.max_attempts:
        annotations[ANNOTATION_MAX_ATTEMPTS] = str(run.max_attempts)
    if run.request is not None:
        if len(run.request.name) <= MAX_LABEL_VALUE:  # the CRD says so; an older object may not
            labels[LABEL_REQUEST] = run.request.name
        annotations[ANNOTATION_REQUEST_UID] = run.request.uid
        annotations[ANNOTATION_REQUEST_INDEX] = str(run.request.index)
    return {
        "name": run.job_name,
        "namespace": sj.namespace,
        "labels": labels,
        "annotations": annotations,
        "finalizers": [FINALIZER_SLOT_RECORD],
        "ownerReferences": [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": sj.name,
                "uid": sj.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def without_ours(entries: object) -> dict[str, Any]:
    """The template's labels or annotations without any of cronlease's own (cronlease.io/...):
    those say what the operator made of a Job (retried, a dead letter, its run), and a template
    must not decide that for every Job it makes."""
    if not isinstance(entries, dict):
        return {}
    return {key: value for key, value in entries.items() if not str(key).startswith(f"{GROUP}/")}
