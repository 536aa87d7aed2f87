"""Exactly once over the whole history: a Job that disappears before its slot is recorded (TTL,
a user, history cleanup) must not run again, across lost writes, crashes and handovers.

The mechanism (docs/design-notes.md, item 21): every Job is created holding the slot-record
finalizer, released only once the ScheduledJob's status records the run. Until then a deletion
only marks the Job, and the next decision, on this leader or the next, records it as the run.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from builders import NAMESPACE
from harness import SLOT, Shell

from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    FINALIZER_SLOT_RECORD,
    LABEL_SCHEDULEDJOB,
    format_time,
    manual_job_name,
    scheduled_job_name,
)
from cronlease.shell.applier import Outcome
from cronlease.shell.kube import JOBS, SCHEDULEDJOBS

JOB = scheduled_job_name("report", SLOT, with_seconds=False)
STATUS_PATH = r"/status$"
COMPLETE = {
    "status": {
        "startTime": format_time(SLOT),
        "completionTime": format_time(SLOT),
        "conditions": [{"type": "Complete", "status": "True"}],
    }
}


def finalizers(shell: Shell) -> dict[str, list[str]]:
    return {job["metadata"]["name"]: job["metadata"].get("finalizers", []) for job in shell.jobs()}


async def test_a_recorded_run_releases_its_job_at_once() -> None:
    shell = Shell()
    shell.create("report")
    assert (await shell.apply("report")).outcome is Outcome.DONE
    assert finalizers(shell) == {JOB: []}


async def test_a_job_deleted_before_its_slot_is_recorded_never_runs_again() -> None:
    """Issue 13: the status write failed, a user (or TTL) deleted the Job, the leader crashed;
    the next leader found no Job and a cursor behind the slot, and ran it again."""
    shell = Shell()
    shell.create("report")
    shell.server.fail("PATCH", STATUS_PATH, 500)
    assert (await shell.apply("report")).outcome is Outcome.RETRY
    assert finalizers(shell) == {JOB: [FINALIZER_SLOT_RECORD]}
    shell.server.remove(*JOBS, NAMESPACE, JOB)  # kubectl delete job, or TTL
    assert shell.jobs()[0]["metadata"].get("deletionTimestamp")  # marked, not gone
    successor = shell.successor()
    assert (await successor.apply("report")).outcome is Outcome.DONE
    assert shell.created_jobs() == [JOB]
    assert shell.jobs() == []  # released once recorded: the deletion completed
    status = shell.status("report")
    assert (status["runsCreated"], status["processedUntil"]) == (1, format_time(SLOT))


async def test_history_limit_zero_never_deletes_an_unrecorded_run_away() -> None:
    """Issue 13: with a limit of 0, the decision that records a finished Job also deletes it;
    if that status write was lost, the next decision found neither Job nor record."""
    shell = Shell()
    shell.create("report", successfulJobsHistoryLimit=0)
    shell.server.fail("PATCH", STATUS_PATH, 500, times=2)
    assert (await shell.apply("report")).outcome is Outcome.RETRY
    shell.server.edit(*JOBS, NAMESPACE, JOB, COMPLETE)
    finished = shell.server.get(*JOBS, NAMESPACE, JOB)
    assert finished is not None
    shell.model.upsert_job(finished)
    assert (await shell.apply("report")).outcome is Outcome.RETRY  # deleted, status lost again
    assert (await shell.successor().apply("report")).outcome is Outcome.DONE
    assert shell.created_jobs() == [JOB]
    assert shell.status("report")["runsCreated"] == 1


async def test_the_jobs_of_a_deleted_scheduledjob_are_released() -> None:
    shell = Shell()
    obj = shell.create("report")
    shell.server.fail("PATCH", STATUS_PATH, 500)
    await shell.apply("report")
    shell.server.remove(*SCHEDULEDJOBS, NAMESPACE, "report")
    shell.model.delete_scheduledjob(obj)
    held = shell.model.held_jobs((NAMESPACE, "report"))
    assert [job.name for job in held] == [JOB]
    assert (await shell.applier.release(NAMESPACE, held)).outcome is Outcome.DONE
    assert finalizers(shell) == {JOB: []}


async def test_a_held_job_whose_owner_reference_is_removed_is_released() -> None:
    """A user orphaning a Job must not leave it unable to be deleted."""
    shell = Shell()
    shell.create("report")
    shell.server.fail("PATCH", STATUS_PATH, 500)
    await shell.apply("report")
    orphaned: dict[str, Any] = {"metadata": {"ownerReferences": None}}
    shell.server.edit(*JOBS, NAMESPACE, JOB, orphaned)
    stored = shell.server.get(*JOBS, NAMESPACE, JOB)
    assert stored is not None
    shell.model.upsert_job(stored)
    shell.now = SLOT.replace(second=30)
    assert (await shell.apply("report")).outcome is Outcome.DONE
    assert finalizers(shell) == {JOB: []}
    assert shell.status("report")["activeCount"] == 0  # not its Job any more


async def test_a_scheduledjob_deleted_in_the_foreground_releases_its_held_jobs() -> None:
    """A foreground deletion waits for its Jobs, and they waited for us: the decision that sees
    the deletionTimestamp releases them (no decision will run their slots again)."""
    shell = Shell()
    shell.create("report")
    shell.server.fail("PATCH", STATUS_PATH, 500)
    await shell.apply("report")
    marked = {"metadata": {"deletionTimestamp": "2026-01-05T08:31:01Z", "finalizers": ["fg"]}}
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, "report", marked)
    obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report")
    assert obj is not None
    shell.model.upsert_scheduledjob(obj)
    assert (await shell.scheduler.reconcile((NAMESPACE, "report"))).outcome is Outcome.DONE
    assert finalizers(shell) == {JOB: []}


async def test_a_lost_run_now_create_is_adopted_as_the_run() -> None:
    """A manual run's slot is its decision's "now", so the retry's differs: adoption matches its
    token, or the operator's own Job would be taken for someone else's."""
    shell = Shell()
    shell.create("report", schedule="0 0 1 1 *")  # nothing due
    annotation = {"metadata": {"annotations": {ANNOTATION_RUN_NOW: "t1"}}}
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, "report", annotation)
    obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, "report")
    assert obj is not None
    shell.model.upsert_scheduledjob(obj)
    shell.server.lose("POST", r"/jobs$", skip=1)  # the first POST is the template's dry run
    assert (await shell.apply("report")).outcome is Outcome.RETRY
    shell.now += timedelta(seconds=3)
    assert (await shell.apply("report")).outcome is Outcome.DONE
    status = shell.status("report")
    assert status["runsCreated"] == 1
    assert finalizers(shell) == {manual_job_name("report", "t1"): []}


async def test_a_relabelled_held_job_leaves_its_former_label() -> None:
    shell = Shell()
    shell.create("report")
    shell.server.fail("PATCH", STATUS_PATH, 500)
    await shell.apply("report")
    relabel: dict[str, Any] = {"metadata": {"labels": {LABEL_SCHEDULEDJOB: "other"}}}
    shell.server.edit(*JOBS, NAMESPACE, JOB, relabel)
    stored = shell.server.get(*JOBS, NAMESPACE, JOB)
    assert stored is not None
    shell.model.upsert_job(stored)
    assert shell.model.held_jobs((NAMESPACE, "report")) == []
    assert [job.name for job in shell.model.held_jobs((NAMESPACE, "other"))] == [JOB]
