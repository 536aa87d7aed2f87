"""The applier on the fake API server: each write the shell makes, and what it does when the
API server says no, loses a response, or another leader has taken over."""

from __future__ import annotations

import asyncio
import copy
from datetime import timedelta
from typing import Any

import pytest
from builders import NAMESPACE
from harness import SLOT, Shell, eventually

from cronlease.core.names.naming import format_time, scheduled_job_name
from cronlease.shell.applier import FENCING_MESSAGE, FollowUp, Outcome
from cronlease.shell.kube import JOBS, LEASES, SCHEDULEDJOBS
from cronlease.shell.leadership import ElectionConfig, LeaseElector, SoleLeader

JOB = scheduled_job_name("report", SLOT, with_seconds=False)
JOB_PATH = r"/jobs$"
STATUS_PATH = r"/status$"


async def test_a_due_slot_creates_its_job_and_records_it() -> None:
    shell = Shell()
    shell.create("report")
    applied = await shell.apply("report")
    assert applied.outcome is Outcome.DONE
    assert [job["metadata"]["name"] for job in shell.jobs()] == [JOB]
    status = shell.status("report")
    assert status["processedUntil"] == format_time(SLOT)
    assert status["runsCreated"] == 1
    assert (status["leader"], status["fencingToken"]) == ("leader-a", 0)
    assert applied.wake_at == SLOT.timestamp() + 60


async def test_a_lost_create_response_is_adopted_not_created_twice() -> None:
    shell = Shell()
    shell.create("report")
    shell.server.lose("POST", JOB_PATH, skip=1)  # the first POST is the template's dry run
    lost = await shell.apply("report")
    assert lost.outcome is Outcome.RETRY
    assert "response lost" in lost.error
    applied = await shell.apply("report")  # the model never heard of the Job: 409, then adopted
    assert applied.outcome is Outcome.DONE
    assert len(shell.jobs()) == 1
    assert shell.status("report")["runsCreated"] == 1


async def test_a_job_of_that_name_owned_by_someone_else_is_never_adopted() -> None:
    shell = Shell()
    shell.create("report")
    squatter = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": {},
    }
    shell.server.put(squatter)
    applied = await shell.apply("report")
    assert applied.outcome is Outcome.STALE  # decided again at once, knowing the name is taken
    assert "processedUntil" not in shell.status("report")  # the slot is not recorded as run
    assert (await shell.apply("report")).outcome is Outcome.DONE
    status = shell.status("report")
    assert status["slotsSkipped"] == {"NameConflict": 1}
    assert status["runsCreated"] == 0
    assert status["processedUntil"] == format_time(SLOT)
    [job] = shell.jobs()
    assert job["spec"] == {}  # the squatter, untouched


async def test_a_status_write_on_a_stale_copy_is_refused_then_decided_again() -> None:
    shell = Shell()
    stale = shell.create("report")
    shell.server.edit(
        "cronlease.io/v1alpha1",
        "scheduledjobs",
        NAMESPACE,
        "report",
        {"metadata": {"labels": {"a": "b"}}},
    )
    applied = await shell.apply("report", stale)
    assert applied.outcome is Outcome.STALE
    assert shell.current("report")["metadata"]["labels"] == {"a": "b"}  # the model was refreshed
    assert (await shell.apply("report")).outcome is Outcome.DONE
    assert len(shell.jobs()) == 1
    assert shell.status("report")["runsCreated"] == 1


async def test_a_template_the_api_server_refuses_is_recorded_once_per_generation() -> None:
    shell = Shell()
    shell.create("report")
    shell.server.fail("POST", JOB_PATH, 422, "spec.template.spec.containers[0].image: Required")
    assert (await shell.apply("report")).outcome is Outcome.DONE
    error = shell.status("report")["templateError"]
    assert error == {"generation": 1, "message": "spec.template.spec.containers[0].image: Required"}
    await shell.apply("report")
    conditions = {c["type"]: c["status"] for c in shell.status("report")["conditions"]}
    assert conditions["InvalidSpec"] == "True"
    assert shell.jobs() == []
    assert [call for call in shell.server.calls if call[0] == "POST" and "/jobs" in call[1]] == [
        ("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
    ]  # one dry run, no retry loop


async def test_a_create_refused_as_invalid_after_its_dry_run_passed_is_recorded_not_raised() -> (
    None
):
    """The dry run passed but the slot's own create is refused as invalid (an admission policy
    that lets dry runs through, a webhook changed since): retrying cannot help, so it is recorded
    for this generation as a refused template, as the dry run's refusal is, and reported as
    InvalidSpec; not an exception for the keyed loop to log and retry with backoff."""
    shell = Shell()
    shell.create("report")
    message = "spec.template.spec.containers[0].image: Required"
    shell.server.fail("POST", JOB_PATH, 422, message, skip=1)  # the first POST is the dry run
    assert (await shell.apply("report")).outcome is Outcome.DONE
    assert shell.status("report")["templateError"] == {"generation": 1, "message": message}
    assert (await shell.apply("report")).outcome is Outcome.DONE
    conditions = {c["type"]: c["status"] for c in shell.status("report")["conditions"]}
    assert conditions["InvalidSpec"] == "True"
    assert shell.jobs() == []
    creates = [call for call in shell.server.calls if call[0] == "POST" and "/jobs" in call[1]]
    assert len(creates) == 2  # the dry run and the one create: no retry loop


async def test_a_run_created_before_its_sibling_was_refused_is_released_after_a_fix() -> None:
    """A catch-up of two slots: the first Job is created, the second refused as invalid. The
    first stays held while the spec is invalid (no slot is recorded then) and is released by
    the first slot of the fixed spec: nothing keeps it for ever."""
    shell = Shell(now=SLOT + timedelta(minutes=1, seconds=0.25))
    shell.create("report", startingDeadlineSeconds=300)  # both missed slots run
    shell.server.fail("POST", JOB_PATH, 422, "refused by a policy", skip=2)
    assert (await shell.apply("report")).outcome is Outcome.DONE
    [held] = shell.jobs()
    shell.model.upsert_job(held)
    assert (await shell.apply("report")).outcome is Outcome.DONE  # reports InvalidSpec
    assert held["metadata"]["finalizers"] == shell.jobs()[0]["metadata"]["finalizers"] != []
    template = copy.deepcopy(shell.current("report")["spec"]["jobTemplate"])
    template["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    user_edit(shell, "report", jobTemplate=template)
    for minutes in (3, 4):
        shell.now = SLOT + timedelta(minutes=minutes, seconds=0.25)
        assert (await shell.apply("report")).outcome is Outcome.DONE
        for job in shell.jobs():
            shell.model.upsert_job(job)
    first = shell.server.get(*JOBS, NAMESPACE, held["metadata"]["name"])
    assert first is not None
    assert not first["metadata"].get("finalizers")


def user_edit(shell: Shell, name: str, **spec: Any) -> None:
    """A user's change to the spec, as the API server stores it (a new generation) and the
    ScheduledJob watch hands it to the model."""
    generation = shell.current(name)["metadata"]["generation"] + 1
    patch = {"metadata": {"generation": generation}, "spec": spec}
    shell.server.edit(*SCHEDULEDJOBS, NAMESPACE, name, patch)
    obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, name)
    assert obj is not None
    shell.model.upsert_scheduledjob(obj)
    assert shell.current(name)["metadata"]["generation"] == generation


async def test_an_edit_that_leaves_the_jobs_as_they_were_sends_no_dry_run_again() -> None:
    """Suspending a ScheduledJob or moving its schedule is a new generation, but the Jobs it
    makes are the ones that passed: at 5,000 ScheduledJobs a dry run each was 5,000 requests
    ahead of everything else. A change to the template is checked again."""
    shell = Shell()
    shell.create("report")
    await shell.apply("report")
    assert len(shell.server.dry_runs) == 1
    user_edit(shell, "report", suspend=True)
    await shell.apply("report")
    user_edit(shell, "report", suspend=False, schedule="*/5 * * * *")
    await shell.apply("report")
    assert len(shell.server.dry_runs) == 1
    template = copy.deepcopy(shell.current("report")["spec"]["jobTemplate"])
    template["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    user_edit(shell, "report", jobTemplate=template)
    await shell.apply("report")
    assert len(shell.server.dry_runs) == 2


async def test_a_refused_template_whose_record_fails_is_retried_not_raised() -> None:
    """The refusal's status write meets a 503: the reconcile ends as a retry (the loop backs off
    and checks again), as any write that fails, not with an exception out of the applier."""
    shell = Shell()
    shell.create("report")
    shell.server.fail("POST", JOB_PATH, 422, "spec.template.spec.containers[0].image: Required")
    shell.server.fail("PATCH", STATUS_PATH, 503, "unavailable")
    applied = await shell.apply("report")
    assert applied.outcome is Outcome.RETRY
    assert "templateError" not in shell.status("report")
    assert shell.jobs() == []


async def elected(shell: Shell, identity: str = "leader-a") -> LeaseElector:
    """A LeaseElector that has acquired the fencing Lease on the shell's server."""
    elector = LeaseElector(shell.api, identity, ElectionConfig("cronlease-system"), lambda: 0.0)
    shell.server.fence = ("cronlease-system", "cronlease-leader")
    await elector.tick()
    assert elector.is_leading()
    return elector


async def test_a_leader_whose_lease_was_taken_is_fenced_and_steps_down() -> None:
    shell = Shell()
    elector = await elected(shell)
    shell.leadership = shell.applier.leadership = elector
    shell.create("report")
    shell.server.edit(
        *LEASES,
        "cronlease-system",
        "cronlease-leader",
        {"spec": {"holderIdentity": "leader-b", "leaseTransitions": 1}},
    )
    applied = await shell.apply("report")  # it still believes it leads: its clock stands still
    assert applied.outcome is Outcome.NOT_LEADING
    assert shell.jobs() == []
    assert not elector.is_leading()


async def test_a_fence_refusal_while_the_lease_is_still_ours_is_retried() -> None:
    """Right after a takeover the policy can read the previous Lease for a few milliseconds."""
    shell = Shell()
    elector = await elected(shell)
    shell.leadership = shell.applier.leadership = elector
    shell.create("report")
    shell.server.fail("POST", JOB_PATH, 403, f"{FENCING_MESSAGE} stale cache", skip=1)
    assert (await shell.apply("report")).outcome is Outcome.DONE
    assert len(shell.jobs()) == 1
    assert elector.is_leading()


async def test_a_status_write_held_for_creations_is_dropped_on_handover_and_recorded_later() -> (
    None
):
    leader = SoleLeader("leader-a")
    shell = Shell(leadership=leader)
    shell.create("report")
    shell.create("slow")
    # slow's Job creation is under way until released; report's status write waits for it.
    release = asyncio.Event()
    shell.server.hold("POST", JOB_PATH, release, body='"name":"slow-')
    slow = asyncio.create_task(shell.apply("slow"))
    report = asyncio.create_task(shell.apply("report"))
    await eventually(lambda: len(shell.jobs()) == 1 and shell.server.held == 1)
    await leader.release()  # handover while the write is held
    release.set()  # slow's create, in flight before the handover, completes
    assert (await report).outcome is Outcome.NOT_LEADING
    await slow
    assert "processedUntil" not in shell.status("report")
    # The next leader, from a cold model: the Job is the slot's run, recorded, not created again.
    successor = Shell(shell.server, SoleLeader("leader-b"))
    for job in shell.jobs():
        successor.model.upsert_job(job)
    obj = shell.server.get("cronlease.io/v1alpha1", "scheduledjobs", NAMESPACE, "report")
    assert obj is not None
    successor.model.upsert_scheduledjob(obj)
    assert (await successor.apply("report")).outcome is Outcome.DONE
    assert [job["metadata"]["name"] for job in shell.jobs()].count(JOB) == 1
    assert successor.status("report")["runsCreated"] == 1
    assert successor.status("report")["processedUntil"] == format_time(SLOT)


async def test_a_deleted_scheduledjob_leaves_no_template_check_behind() -> None:
    shell = Shell()
    obj = shell.create("report")
    await shell.scheduler.reconcile((NAMESPACE, "report"))
    assert shell.applier.checked_templates == 1
    shell.model.delete_scheduledjob(obj)
    await shell.scheduler.reconcile((NAMESPACE, "report"))
    assert shell.applier.checked_templates == 0


def finish(shell: Shell, name: str) -> None:
    """The Job succeeded at its slot, and the model has seen it."""
    finished = {
        "status": {
            "startTime": format_time(SLOT),
            "completionTime": format_time(SLOT),
            "conditions": [{"type": "Complete", "status": "True"}],
        }
    }
    shell.server.edit(*JOBS, NAMESPACE, name, finished)
    stored = shell.server.get(*JOBS, NAMESPACE, name)
    assert stored is not None
    shell.model.upsert_job(stored)


async def test_a_deleted_job_is_deleted_by_uid_only() -> None:
    """History cleanup names the uid it decided on: a Job recreated under the name survives."""
    shell = Shell()
    shell.create("report", successfulJobsHistoryLimit=0)
    await shell.apply("report")
    job = shell.jobs()[0]
    finish(shell, JOB)
    # Someone replaces the Job between the decision and the delete.
    shell.server.remove(*JOBS, NAMESPACE, JOB)
    shell.server.put({**job, "metadata": {**job["metadata"], "uid": "", "resourceVersion": ""}})
    await shell.apply("report")
    assert [j["metadata"]["name"] for j in shell.jobs()] == [JOB]


async def test_history_cleanup_waits_behind_creations_and_a_replaced_run_does_not() -> None:
    """At a burst, a finished Job past its limit is deleted in the follow-up, behind creations;
    a run Replace supersedes is deleted before its successor is created, in the acting slot."""
    shell = Shell()
    shell.create("report", successfulJobsHistoryLimit=0)
    shell.create("replacing", concurrencyPolicy="Replace")
    for name in ("report", "replacing"):
        await shell.apply(name)
    finish(shell, JOB)
    shell.now = SLOT + timedelta(minutes=1)  # the next slot: replacing's Job is still running
    running, successor = (
        scheduled_job_name("replacing", slot, with_seconds=False) for slot in (SLOT, shell.now)
    )
    with shell.applier.creations.creating():  # another ScheduledJob's creation is under way
        acted = {
            name: await shell.scheduler.act_on(shell.model.scheduledjob((NAMESPACE, name)))
            for name in ("report", "replacing")
        }
        names = [job["metadata"]["name"] for job in shell.jobs()]
        assert JOB in names  # report's cleanup waits...
        assert running not in names  # ...replacing's deletion did not
        assert successor in names
    report = acted["report"]
    assert isinstance(report, FollowUp)
    assert [deletion.job_name for deletion in report.cleanups] == [JOB]
    assert (await shell.applier.follow_up(report)).outcome is Outcome.DONE
    assert JOB not in [job["metadata"]["name"] for job in shell.jobs()]


async def test_a_follow_up_not_behind_creations_is_written_while_they_are_under_way() -> None:
    """A carried follow-up is written by the worker that carried it, which counts as a creation
    for its whole life: told not to wait behind creations, it does not wait on that worker."""
    shell = Shell()
    shell.create("report")
    with shell.applier.creations.creating():  # the carrying worker
        acted = await shell.scheduler.act_on(shell.model.scheduledjob((NAMESPACE, "report")))
        assert isinstance(acted, FollowUp)
        assert acted.status is not None
        # Bounded only so that a wait behind creations fails here rather than at the patience.
        written = await asyncio.wait_for(
            shell.applier.follow_up(acted, behind_creations=False), timeout=5
        )
        assert written.outcome is Outcome.DONE
        assert "lastScheduleTime" in shell.status("report")


@pytest.mark.parametrize(("failing", "progress"), [(1, False), (2, True)])
async def test_a_catch_up_that_created_some_of_its_runs_made_progress(
    failing: int, progress: bool
) -> None:
    """A catch-up of several runs under a steady rate of faults keeps its retries short."""
    shell = Shell(now=SLOT + timedelta(minutes=1, seconds=0.25))
    shell.create("report", startingDeadlineSeconds=300)  # both missed slots still run
    shell.server.fail("POST", JOB_PATH, 500, skip=failing)  # skip the dry run, then creates
    applied = await shell.apply("report")
    assert applied.outcome is Outcome.RETRY
    assert applied.progress is progress
    assert len(shell.jobs()) == failing - 1


async def test_a_namespace_being_deleted_is_left_alone_not_retried() -> None:
    """Issue 13: a create in a terminating namespace was retried with a FailedCreate Event each
    time until the namespace was gone."""
    shell = Shell()
    shell.create("report")
    message = 'jobs.batch is forbidden: {"causes":[{"reason":"NamespaceTerminating"}]}'
    shell.server.fail("POST", JOB_PATH, 403, message, skip=1)
    applied = await shell.apply("report")
    await shell.applier.drain()
    assert applied.outcome is Outcome.DONE
    assert applied.wake_at is None
    assert not [path for method, path in shell.server.calls if path.endswith("/events")]


async def test_a_write_refused_for_the_writers_identity_is_not_taken_for_a_stale_lease() -> None:
    """The fence refuses anyone but the release's ServiceAccount: an operator run under another
    identity must say so, not verify its Lease and retry as after a takeover."""
    shell = Shell()
    shell.create("report")
    refusal = f'{FENCING_MESSAGE} only system:serviceaccount:x:y writes; "alice" may not'
    shell.server.fail("POST", JOB_PATH, 403, refusal, skip=1, times=10)
    applied = await shell.apply("report")
    assert applied.outcome is Outcome.RETRY
    assert "not the release's ServiceAccount" in applied.error
    assert [m for m, path in shell.server.calls if path.endswith("/jobs")].count("POST") == 2


async def test_a_reconcile_waiting_for_a_worker_reads_its_object_only_once_it_has_one() -> None:
    # At a burst thousands of reconciles wait for one of the loop's workers: each holding a
    # decoded copy of its ScheduledJob set the operator's peak memory (design note 100). They
    # wait as keys; a worker reads the object when it takes the key, and decides on it then.
    shell = Shell(concurrency=1)
    created = {name: shell.create(name) for name in ("slow", "report", "gone")}
    read: list[str] = []
    model_read = shell.model.scheduledjob

    def reading(key: tuple[str, str]) -> dict[str, Any] | None:
        read.append(key[1])
        return model_read(key)

    shell.model.scheduledjob = reading  # type: ignore[method-assign]
    release = asyncio.Event()
    shell.server.hold("POST", JOB_PATH, release, body='"name":"slow-')
    task = asyncio.create_task(shell.scheduler.run())
    try:
        await eventually(lambda: shell.server.held == 1)
        assert read == ["slow"]
        # Deleted while it waited: decided as gone, without a read of a copy.
        shell.model.delete_scheduledjob(created["gone"])
        release.set()
        await eventually(lambda: bool(shell.status("report")) and bool(shell.status("slow")))
        assert read[:2] == ["slow", "report"]  # then their own status writes wake them again
        assert "gone" not in read
        assert shell.status("report")["processedUntil"] == format_time(SLOT)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shell.scheduler.drain()


async def test_a_job_history_deleted_is_not_deleted_again_before_its_watch_event() -> None:
    """A decision between our DELETE's response and the Job's DELETED event must not delete it
    again: the model hears of the deletion from the response, as it does of a create (the
    repeats answered 404 were a third of `make writes`' history DELETEs)."""
    shell = Shell()
    shell.create("report", successfulJobsHistoryLimit=0)
    await shell.apply("report")
    finish(shell, JOB)
    await shell.apply("report")  # deletes the finished Job; its watch event has not come
    assert JOB not in [job["metadata"]["name"] for job in shell.jobs()]
    await shell.apply("report")  # decided again, e.g. woken by its own status write
    deletes = [path for method, path in shell.server.calls if method == "DELETE"]
    assert deletes == [f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}"]
