"""Issue 33's findings about multi-step runs, on the supervisor shell and the fake API server:
each test failed on 50639a8 (the code the review read) and passes now. The pure side is in
test_every_run.py; the whole history, under every fault at once, in test_run_history.py."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from builders import NAMESPACE, job_template
from harness import Shell, eventually
from test_supervisor import Steps, phases

from cronlease.core.bodies.stepjob import step_job_name
from cronlease.core.decide.supervision import Action
from cronlease.core.names.naming import FINALIZER_SUPERVISION
from cronlease.shell.kube import JOBS, LEASES, RUNS, SCHEDULEDJOBS

UNDO = {"jobTemplate": job_template()}
PARALLEL = [
    {"name": "fails", "jobTemplate": job_template()},
    {"name": "long", "jobTemplate": job_template()},
]
BANK = [
    {"name": "snapshot", "jobTemplate": job_template(), "compensate": UNDO},
    {"name": "interest", "dependsOn": ["snapshot"], "jobTemplate": job_template()},
]


async def run_of(steps: list[dict[str, Any]], **spec: Any) -> Steps:
    shell = Shell()
    shell.create("close", steps=steps, jobTemplate=None, **spec)
    await shell.apply("close")
    return Steps(shell)


def job_of(steps: Steps, step: str, attempt: int = 1, action: Action = Action.RUN) -> str:
    return step_job_name("close", steps.key()[1], step, action, attempt)


def events(shell: Shell, reason: str) -> list[dict[str, Any]]:
    return [e for e in shell.server.items("v1", "events", NAMESPACE) if e.get("reason") == reason]


# Finding 1


async def test_a_lost_delete_of_a_cancelled_step_is_made_again_and_the_run_waits_for_it() -> None:
    steps = await run_of(PARALLEL, onFailure="Stop")
    await steps.supervise()
    steps.finish(job_of(steps, "fails"), "Failed")
    steps.shell.server.fail("DELETE", "/jobs/", 500)  # the DELETE after the final write
    await steps.supervise_failing()
    assert steps.run()["status"]["phase"] == "Failed"
    long = job_of(steps, "long")
    assert not steps.step_jobs()[long]["metadata"].get("deletionTimestamp")
    await steps.supervise()  # a final Run still ends its steps
    assert long not in steps.step_jobs() or steps.step_jobs()[long]["metadata"].get(
        "deletionTimestamp"
    )
    assert FINALIZER_SUPERVISION in steps.run()["metadata"]["finalizers"]  # not let go yet
    await steps.supervise()
    assert not steps.run()["metadata"].get("finalizers")  # none lives: let go


# Finding 4


async def test_an_orphaned_running_step_is_still_its_attempt_and_goes_with_its_run() -> None:
    steps = await run_of(BANK)
    await steps.supervise()
    snapshot = job_of(steps, "snapshot")
    steps.shell.server.edit(*JOBS, NAMESPACE, snapshot, {"metadata": {"ownerReferences": None}})
    await steps.supervise()
    await steps.supervise()
    assert phases(steps.run())["snapshot"] == ("Running", 1)
    assert steps.created_step_jobs() == [snapshot]  # no second attempt beside it
    key = steps.key()
    steps.shell.server.edit(*RUNS, NAMESPACE, key[1], {"metadata": {"finalizers": None}})
    steps.shell.server.remove(*RUNS, NAMESPACE, key[1])  # gone, the orphan does not stay
    steps.sync()
    await steps.supervisor.supervise(key)
    assert snapshot not in steps.step_jobs()


async def test_a_step_deleted_in_the_background_is_redone_only_once_its_pods_are_gone() -> None:
    retried = {"maxAttempts": 2, "backoff": {"initialSeconds": 0}}
    steps = await run_of([{**BANK[0], "retry": retried}, BANK[1]])
    await steps.supervise()
    first = job_of(steps, "snapshot")
    steps.shell.server.remove(*JOBS, NAMESPACE, first)  # kubectl delete job: background
    await steps.supervise()  # attempt 1 lost; its pods run on
    await steps.supervise()  # settled: released, so gone; the garbage collector stops its pods
    assert first not in steps.step_jobs()
    await steps.supervise()  # woken by its deletion: its pods are stopped by 30 s + a margin
    steps.shell.now += timedelta(seconds=30)
    await steps.supervise()
    assert steps.created_step_jobs() == [first]  # within their grace period: no attempt 2
    steps.shell.now += timedelta(seconds=11)
    await steps.supervise()
    assert phases(steps.run())["snapshot"] == ("Running", 2)


# Finding 5


async def test_a_step_job_the_api_refuses_fails_its_attempt_and_the_run_ends() -> None:
    steps = await run_of(BANK)
    steps.shell.server.fail("POST", "/jobs$", 403, "exceeded quota: compute", times=100)
    await steps.supervise()
    await steps.supervise()  # the refusal is the attempt's failure: one attempt, escalated
    status = steps.run()["status"]
    assert status["phase"] in ("Compensated", "Failed")
    entry = status["steps"][0]
    assert (entry["phase"], entry["reason"]) == ("Failed", "CreateRefused")
    assert "exceeded quota" in entry["message"]
    assert events(steps.shell, "FailedCreate")
    escalated = {c["type"]: c["reason"] for c in status["conditions"]}
    assert escalated["Escalated"] == "RetriesExhausted"


# Finding 9


async def test_a_run_deleted_while_it_runs_compensates_then_goes() -> None:
    steps = await run_of(BANK)
    await steps.supervise()
    steps.finish(job_of(steps, "snapshot"))
    await steps.supervise()
    key = steps.key()
    steps.shell.server.remove(*RUNS, NAMESPACE, key[1])  # a user, Replace, CancelOther
    assert steps.run()["metadata"].get("deletionTimestamp")  # kept: supervision finalizer
    await steps.supervise()
    assert steps.run()["status"]["phase"] == "Compensating"
    undo = job_of(steps, "snapshot", action=Action.COMPENSATE)
    assert undo not in steps.step_jobs()  # not while interest's Job lives
    await steps.supervise()  # interest's attempt settled: released, gone
    await steps.supervise()  # the compensation starts
    assert undo in steps.step_jobs()
    steps.finish(undo)
    await steps.supervise()
    assert steps.shell.server.get(*RUNS, NAMESPACE, key[1]) is None  # compensated, then gone
    cancelled = [c for c in events(steps.shell, "Cancelled") if "deleted" in c["message"]]
    assert cancelled


# Finding 12


async def test_a_lease_someone_made_under_an_attempts_name_is_replaced() -> None:
    steps = await run_of(
        [{**BANK[0], "heartbeat": {"timeoutSeconds": 30}}, BANK[1]],
    )
    steps.sync()
    squatter = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": job_of(steps, "snapshot"), "namespace": NAMESPACE},
        "spec": {"holderIdentity": "tenant"},
    }
    steps.shell.server.put(squatter)
    await steps.supervise()
    lease = steps.shell.server.get(*LEASES, NAMESPACE, job_of(steps, "snapshot"))
    assert lease is not None
    job = steps.step_jobs()[job_of(steps, "snapshot")]
    assert lease["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert "cronlease.io/step" in lease["metadata"]["labels"]
    assert events(steps.shell, "HeartbeatLeaseTaken")


# Finding 8


class Switch:
    """A Lease this replica holds only when the test says so."""

    def __init__(self) -> None:
        self.identity, self.token = "leader-a", 0
        self.leading = False
        self._changed = asyncio.Event()

    def is_leading(self) -> bool:
        return self.leading

    async def wait_leading(self) -> None:
        while not self.leading:
            self._changed.clear()
            await self._changed.wait()

    async def verify(self) -> bool:
        return self.leading

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def release(self) -> None:
        self.leading = False

    def take(self) -> None:
        self.leading = True
        self._changed.set()


async def test_a_standby_keeps_no_wake_up_and_a_new_leader_derives_them_all() -> None:
    switch = Switch()
    shell = Shell(leadership=switch)
    task = asyncio.create_task(shell.scheduler.run())
    try:
        for index in range(50):
            shell.create(f"report-{index}")
        for index in range(50):  # and their updates, and deletions, as a standby sees them
            obj = shell.server.get(*SCHEDULEDJOBS, NAMESPACE, f"report-{index}")
            assert obj is not None
            shell.model.delete_scheduledjob(obj)
            shell.model.upsert_scheduledjob(obj)
        await asyncio.sleep(0)
        assert len(shell.wakeups) == 0
        switch.take()
        await eventually(lambda: all(shell.status(f"report-{i}") for i in range(50)))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await shell.scheduler.drain()


async def test_a_standby_supervisor_keeps_no_wake_up_either() -> None:
    switch = Switch()
    steps = await run_of(BANK)
    steps.shell.leadership = steps.shell.applier.leadership = switch
    switch.leading = False
    standby = Steps(steps.shell)
    task = asyncio.create_task(standby.supervisor.run())
    try:
        await asyncio.sleep(0)
        standby.sync()
        assert len(standby.wakeups) == 0
        switch.take()
        await eventually(lambda: "steps" in (standby.run().get("status") or {}))
        assert phases(standby.run())["snapshot"] == ("Running", 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await standby.supervisor.drain()


async def test_a_claimed_attempt_times_out_no_later_after_a_restart() -> None:
    """Finding 3 through the shell: a successor's fresh store counts the hung step's last
    renewal, so it restarts the step when the first leader would have."""
    steps = await run_of([{**BANK[0], "heartbeat": {"timeoutSeconds": 30}}, BANK[1]])
    await steps.supervise()
    steps.shell.now += timedelta(seconds=25)  # the pod renewed at the claim, then hung
    successor = Steps(steps.shell)  # a restarted operator: a cold store
    successor.sync()
    steps.shell.now += timedelta(seconds=6)
    await successor.supervise()
    assert phases(successor.run())["snapshot"][0] in ("Retrying", "Failed")
