"""What the operator reads from Jobs it did not write, and the slot-record finalizer's release.

Issue 13: a Job pre-created with a slot's name and an owner reference was adopted as the slot's
run; a Job that lost its owner reference stayed active forever; a bad annotation broke the watch.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from builders import (
    HOURLY,
    NAMESPACE,
    UID,
    condition,
    job,
    processed,
    skip_counts,
    slot_job,
    spec,
    utc,
    view,
)

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import PlannedRun, SkipReason
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobState, job_info
from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    FINALIZER_SLOT_RECORD,
    LABEL_SCHEDULEDJOB,
    TRIGGER_MANUAL,
    manual_job_name,
    scheduled_job_name,
)
from cronlease.shell.model import Model

H10, H11, H12 = (utc(2026, 1, 5, hour) for hour in (10, 11, 12))
CONFLICT = SkipReason.NAME_CONFLICT.value
N11, N12 = (scheduled_job_name("backup", slot, with_seconds=False) for slot in (H11, H12))


def leader_job(**run: Any) -> dict[str, Any]:
    """A Job as the leader writes it, with a uid and a resourceVersion as the API server adds."""
    planned = PlannedRun(**{"job_name": N11, "slot": H11, "trigger": "Schedule", **run})
    obj = build_job(view(spec()), planned, "replica-a", 3)
    obj["metadata"].update(uid="uid-job", resourceVersion="7")
    return obj


def without(path: tuple[str, ...]) -> dict[str, Any]:
    obj = leader_job()
    target = obj
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return obj


def with_value(path: tuple[str, ...], value: object) -> dict[str, Any]:
    obj = leader_job()
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return obj


ANNOTATIONS = ("metadata", "annotations")


@pytest.mark.parametrize(
    ("obj", "trusted"),
    [
        (leader_job(), True),
        (without(("metadata", "ownerReferences")), False),
        (without(("metadata", "labels")), False),
        (with_value(("metadata", "labels", LABEL_SCHEDULEDJOB), "other"), False),
        (without((*ANNOTATIONS, ANNOTATION_LEADER)), False),
        (without((*ANNOTATIONS, ANNOTATION_FENCING_TOKEN)), False),
        (with_value((*ANNOTATIONS, ANNOTATION_FENCING_TOKEN), "-1"), False),
        (with_value((*ANNOTATIONS, ANNOTATION_FENCING_TOKEN), "٣"), False),  # an Arabic 3
        (with_value((*ANNOTATIONS, ANNOTATION_SCHEDULED_AT), "soon"), False),
        (with_value((*ANNOTATIONS, ANNOTATION_TRIGGER), "Cron"), False),
        (with_value((*ANNOTATIONS, ANNOTATION_TRIGGER), TRIGGER_MANUAL), False),  # no token
        (leader_job(trigger=TRIGGER_MANUAL, run_now_token="t1"), True),
        (with_value(("metadata", "ownerReferences", 0, "kind"), "CronJob"), False),
        (with_value(("metadata", "ownerReferences", 0, "controller"), False), False),
    ],
    ids=[
        "as-written",
        "no-owner",
        "no-labels",
        "label-names-another",
        "no-leader",
        "no-token",
        "negative-token",
        "non-ascii-token",
        "bad-slot",
        "unknown-trigger",
        "manual-without-token",
        "manual",
        "owner-not-a-scheduledjob",
        "owner-not-controller",
    ],
)
def test_a_job_is_a_run_only_with_everything_the_leader_writes(
    obj: dict[str, Any], trusted: bool
) -> None:
    assert job_info(obj).trusted is trusted


@pytest.mark.parametrize(
    ("path", "value", "trusted"),
    [
        (("metadata", "annotations"), ["not", "a", "map"], False),
        (("metadata", "annotations", ANNOTATION_SCHEDULED_AT), 12, False),
        (("metadata", "labels"), "x", False),
        (("metadata", "ownerReferences"), {"uid": UID}, False),
        (("metadata", "ownerReferences"), ["x", None], False),
        (("metadata", "ownerReferences", 0, "uid"), 5, False),
        (("metadata", "finalizers"), "x", True),
        (("metadata", "creationTimestamp"), "yesterday", True),
        (("status",), {"conditions": "Complete"}, True),
        (("status",), {"conditions": [None, {"type": "Complete", "status": "True"}]}, True),
        (("status",), {"startTime": {"no": "time"}}, True),
    ],
)
def test_a_hostile_job_is_read_without_an_exception(
    path: tuple[str, ...], value: object, trusted: bool
) -> None:
    info = job_info(with_value(path, value))
    assert info.name == N11
    assert info.trusted is trusted


def test_a_job_whose_owner_reference_is_removed_leaves_its_owner() -> None:
    """Issue 13: a user kept a running Job for debugging by removing its ownerReference; its
    ScheduledJob counted it as active forever (Forbid skipped every slot)."""
    woken: list[tuple[str, str]] = []
    model = Model(woken.append)
    obj = leader_job()
    model.upsert_job(obj)
    assert [info.name for info in model.jobs_of(NAMESPACE, UID)] == [N11]
    orphaned = copy.deepcopy(obj)
    orphaned["metadata"]["ownerReferences"] = []
    orphaned["metadata"]["resourceVersion"] = "8"
    model.upsert_job(orphaned)
    assert model.jobs_of(NAMESPACE, UID) == []
    assert woken[-1] == (NAMESPACE, "backup")


def test_owners_are_keyed_by_namespace() -> None:
    """An owner reference names no namespace: a Job elsewhere pointing at the uid is not owned."""
    model = Model(lambda key: None)
    obj = leader_job()
    obj["metadata"]["namespace"] = "team-b"
    model.upsert_job(obj)
    assert model.jobs_of(NAMESPACE, UID) == []
    assert [info.name for info in model.jobs_of("team-b", UID)] == [N11]


FORGED = job(N11, slot=H11, trusted=False)  # H11's name, not the leader's


def test_a_forged_job_with_the_slots_name_is_a_conflict_not_a_run() -> None:
    """Issue 13: a tenant pre-created the slot's Job with an owner reference to the ScheduledJob;
    it was adopted as the slot's run, and its result reported as the ScheduledJob's."""
    raw = spec(concurrencyPolicy="Forbid")
    decision = decide(view(raw, status=processed(raw, H10)), [FORGED], H11)
    assert decision.runs == []
    assert decision.recorded == []
    assert skip_counts(decision) == {CONFLICT: 1}
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "SkippedNameConflict")]
    assert decision.status["runsCreated"] == 0
    assert decision.status["active"] == []


@pytest.mark.parametrize("policy", ["Forbid", "Replace"])
def test_an_untrusted_active_job_is_neither_counted_nor_replaced(policy: str) -> None:
    raw = spec(concurrencyPolicy=policy)
    mine = job("backup-by-hand", slot=H10, trusted=False)
    decision = decide(view(raw, status=processed(raw, H11)), [mine], H12)
    assert [run.slot for run in decision.runs] == [H12]
    assert decision.deletions == []


def test_an_untrusted_finished_job_is_not_history() -> None:
    raw = spec(successfulJobsHistoryLimit=0)
    mine = job("backup-by-hand", slot=H10, state=JobState.SUCCEEDED, finished_at=H10, trusted=False)
    decision = decide(view(raw, status=processed(raw, H11)), [mine], H11)
    assert decision.deletions == []


def test_run_now_on_a_forged_name_is_refused_once() -> None:
    raw = spec()
    sj = view(raw, status=processed(raw, H11), run_now="t1")
    forged = job(manual_job_name("backup", "t1"), trusted=False, trigger=TRIGGER_MANUAL)
    decision = decide(sj, [forged], H11)
    assert decision.runs == []
    assert [e.reason for e in decision.events] == ["RunNowConflict"]
    assert decision.status["runNowToken"] == "t1"


# The slot-record finalizer: released once the run is recorded in the persisted status.


def held(slot: Any, **fields: Any) -> Any:
    return slot_job(slot, held=True, **fields)


@pytest.mark.parametrize(
    ("persisted_until", "jobs", "released"),
    [
        (H10, [held(H11)], []),  # created, not yet recorded: must stay
        (H11, [held(H11)], [N11]),
        (H12, [held(H11), held(H12)], [N11, N12]),
        (H11, [held(H11, deleting=True)], [N11]),
        (H10, [held(H11, deleting=True)], []),  # deleted by a user: kept until recorded
        (H10, [held(H11, trusted=False)], [N11]),  # not a run: not ours to keep
        (H11, [slot_job(H11)], []),  # released already: no write
    ],
    ids=[
        "unrecorded",
        "recorded",
        "two",
        "deleting-recorded",
        "deleting-unrecorded",
        "untrusted",
        "released",
    ],
)
def test_the_finalizer_is_released_once_the_slot_is_persisted(
    persisted_until: Any, jobs: list[Any], released: list[str]
) -> None:
    raw = spec(schedule=HOURLY)
    decision = decide(view(raw, status=processed(raw, persisted_until)), jobs, H11)
    assert sorted(release.job_name for release in decision.releases) == released


@pytest.mark.parametrize(
    ("requested", "acknowledged", "released"),
    [("t1", None, False), ("t1", "t1", True), ("t2", None, True), ("t2", "t1", True)],
)
def test_a_run_now_jobs_finalizer_goes_once_its_token_is_settled(
    requested: str, acknowledged: str | None, released: bool
) -> None:
    raw = spec()
    status = processed(raw, H11, **({"runNowToken": acknowledged} if acknowledged else {}))
    sj = view(raw, status=status, run_now=requested)
    manual = job(
        manual_job_name("backup", "t1"),
        slot=H11,
        trigger=TRIGGER_MANUAL,
        run_now_token="t1",
        held=True,
    )
    decision = decide(sj, [manual], H11)
    assert [release.job_name for release in decision.releases] == (
        [manual.name] if released else []
    )


def test_resuming_records_the_suspensions_slots_once_as_suspended() -> None:
    """A suspended ScheduledJob is not woken per slot; the decision after it is resumed records
    the slots of the suspension as Suspended, in one write and one Normal Event."""
    suspended = decide(view(spec(suspend=True), status=processed(spec(), H10)), [], H10)
    assert suspended.wake_at is None
    assert condition(suspended.status, "Suspended")["status"] == "True"
    resumed = decide(view(spec(), status=suspended.status), [], utc(2026, 1, 5, 12, 30))
    assert resumed.runs == []
    assert skip_counts(resumed) == {SkipReason.SUSPENDED.value: 2}
    assert [(e.type, e.reason) for e in resumed.events] == [("Normal", "SkippedSuspended")]
    assert resumed.wake_at == utc(2026, 1, 5, 13)


def test_the_finalizer_is_written_on_every_job() -> None:
    assert FINALIZER_SLOT_RECORD in leader_job()["metadata"]["finalizers"]
