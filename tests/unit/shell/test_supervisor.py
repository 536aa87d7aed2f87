"""The supervisor shell on the fake API server (issue 17): a multi-step run from its slot to its
end, through lost responses, stale copies, a deposed leader and a deleted Run."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from builders import NAMESPACE, job_template
from harness import NOW, Shell

from cronlease.core.bodies.stepjob import LABEL_STEP
from cronlease.core.decide.supervision import Action, StepJob
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import FINALIZER_SLOT_RECORD, FINALIZER_SUPERVISION
from cronlease.shell.applier import NotLeading
from cronlease.shell.kube import JOBS, LEASES, RUNS
from cronlease.shell.leadership import ElectionConfig, LeaseElector
from cronlease.shell.model import Key
from cronlease.shell.runstore import RunStore
from cronlease.shell.supervisor import Supervisor
from cronlease.shell.wakeups import WakeupQueue
from cronlease.shell.writer import RetryLater, Stale

STEPS = [
    {"name": "snapshot", "jobTemplate": job_template()},
    {
        "name": "interest",
        "dependsOn": ["snapshot"],
        "jobTemplate": job_template(),
        "heartbeat": {"timeoutSeconds": 30},
        "retry": {"maxAttempts": 2, "backoff": {"initialSeconds": 0}},
    },
]


class Steps:
    """A Shell with the supervisor beside it, its store fed as the watches would feed it."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.wakeups: WakeupQueue[Key] = WakeupQueue()
        self.store = RunStore(self.wakeups.notify, clock=lambda: shell.now)
        listed = asyncio.Event()
        listed.set()
        self.supervisor = Supervisor(
            shell.leadership,
            self.store,
            shell.applier,
            self.wakeups,
            listed.wait,
            clock=lambda: shell.now,
        )

    def sync(self) -> None:
        server = self.shell.server
        for run in server.items(*RUNS, NAMESPACE):
            self.store.upsert_run(run)
            self.shell.applier.runs.upsert_job(run)
        for job in server.items(*JOBS, NAMESPACE):
            if LABEL_STEP in (job["metadata"].get("labels") or {}):
                self.store.upsert_step_job(job)
        for lease in server.items(*LEASES, NAMESPACE):
            self.store.upsert_lease(lease)
        for collection, resource in (("runs", RUNS), ("jobs", JOBS), ("leases", LEASES)):
            listed = {(NAMESPACE, o["metadata"]["name"]) for o in server.items(*resource)}
            self.store.forget_unlisted(collection, NAMESPACE, listed)

    def run(self) -> dict[str, Any]:
        runs = self.shell.server.items(*RUNS, NAMESPACE)
        assert len(runs) == 1
        return runs[0]

    def key(self) -> Key:
        return (NAMESPACE, self.run()["metadata"]["name"])

    async def supervise(self) -> None:
        self.sync()
        await self.supervisor.supervise(self.key())
        self.sync()

    async def supervise_failing(self) -> None:
        """One supervision that ends in a failed write (the loop retries it after a backoff)."""
        self.sync()
        with pytest.raises(RetryLater):
            await self.supervisor.supervise(self.key())
        self.sync()

    def step_jobs(self) -> dict[str, dict[str, Any]]:
        return {
            job["metadata"]["name"]: job
            for job in self.shell.jobs()
            if LABEL_STEP in (job["metadata"].get("labels") or {})
        }

    def finish(self, name: str, condition: str = "Complete") -> None:
        stamp = self.shell.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.shell.server.edit(
            *JOBS,
            NAMESPACE,
            name,
            {"status": {"conditions": [{"type": condition, "status": "True",
                                        "lastTransitionTime": stamp}]}},
        )  # fmt: skip

    def created_step_jobs(self) -> list[str]:
        return [
            name
            for name in self.shell.created_jobs()
            if name not in {"close-check"} and name.startswith("close-s")
        ]


async def started() -> Steps:
    shell = Shell()
    shell.create("close", steps=STEPS, jobTemplate=None)
    await shell.apply("close")
    return Steps(shell)


def phases(run: dict[str, Any]) -> dict[str, tuple[str, int]]:
    return {e["name"]: (e["phase"], e["attempt"]) for e in run["status"]["steps"]}


async def test_a_slot_runs_as_a_run_whose_steps_run_in_order_then_it_is_recorded() -> None:
    steps = await started()
    run = steps.run()
    # Recorded in its ScheduledJob's status, then released in the same apply, as a Job is.
    assert steps.shell.status("close")["active"][0]["kind"] == "Run"
    assert run["metadata"].get("finalizers") == [FINALIZER_SUPERVISION]  # until it is final
    assert any(c.startswith("PATCH") and "/runs/" in p for c, p in steps.shell.server.calls)
    assert run["spec"]["steps"][1]["retry"]["maxAttempts"] == 2  # a snapshot, defaults filled
    await steps.supervise()
    assert phases(steps.run())["snapshot"] == ("Running", 1)
    (first,) = steps.step_jobs()
    assert steps.step_jobs()[first]["metadata"]["finalizers"] == [FINALIZER_SLOT_RECORD]
    steps.finish(first)
    await steps.supervise()
    assert phases(steps.run()) == {"snapshot": ("Succeeded", 1), "interest": ("Running", 1)}
    await steps.supervise()  # the settled attempt's Job is released
    assert not steps.step_jobs()[first]["metadata"].get("finalizers")
    second = next(name for name in steps.step_jobs() if name != first)
    lease = steps.shell.server.get(*LEASES, NAMESPACE, second)
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == second  # the attempt's own Lease
    steps.finish(second)
    await steps.supervise()
    assert steps.run()["status"]["phase"] == "Succeeded"
    steps.shell.now += timedelta(seconds=1)
    await steps.shell.apply("close")  # its ScheduledJob records the run as it would a Job
    recent = steps.shell.status("close")["recentRuns"]
    assert [(r.get("run") or r["job"], r["result"]) for r in recent] == [
        (run["metadata"]["name"], "Succeeded")
    ]
    assert not steps.run()["metadata"].get("finalizers")


async def test_a_lost_create_response_never_makes_a_second_job_for_an_attempt() -> None:
    steps = await started()
    steps.shell.server.lose("POST", "/jobs$")
    with pytest.raises(RetryLater):
        await steps.supervise()
    key = steps.key()
    steps.store.forget_unlisted("jobs", NAMESPACE, set())  # its watch event is not in yet
    await steps.supervisor.supervise(key)  # the claimed attempt's Job exists: adopted
    assert len(steps.created_step_jobs()) == 1
    assert len(steps.store.jobs_of(key)) == 1
    assert phases(steps.run())["snapshot"] == ("Running", 1)


async def test_a_heartbeat_that_stops_restarts_the_step_and_deletes_the_stale_attempt() -> None:
    steps = await started()
    await steps.supervise()
    steps.finish(next(iter(steps.step_jobs())))
    await steps.supervise()
    steps.shell.now += timedelta(seconds=31)  # nobody renewed the Lease
    await steps.supervise()
    stale = [n for n, j in steps.step_jobs().items() if j["metadata"].get("deletionTimestamp")]
    assert len(stale) == 1  # deleted in the foreground, held until its attempt is settled
    await steps.supervise()  # settled: released, and then gone (no pods to wait for here)
    await steps.supervise()
    assert phases(steps.run())["interest"] == ("Running", 2)
    assert len(steps.created_step_jobs()) == 3
    assert stale[0] not in steps.step_jobs()  # released: the fake deletes it at once


async def test_a_deposed_leader_claims_nothing() -> None:
    """The API server refuses its claim (the fencing policy on runs/status): no attempt starts."""
    shell = Shell()
    elector = LeaseElector(shell.api, "leader-a", ElectionConfig("cronlease-system"), lambda: 0.0)
    shell.server.fence = ("cronlease-system", "cronlease-leader")
    await elector.tick()
    shell.leadership = shell.applier.leadership = elector
    shell.create("close", steps=STEPS, jobTemplate=None)
    await shell.apply("close")
    steps = Steps(shell)
    shell.server.edit(
        *LEASES,
        "cronlease-system",
        "cronlease-leader",
        {"spec": {"holderIdentity": "leader-b", "leaseTransitions": 1}},
    )
    with pytest.raises(NotLeading):
        await steps.supervise()
    assert "steps" not in (steps.run().get("status") or {})
    assert steps.created_step_jobs() == []
    assert not elector.is_leading()


async def test_the_step_jobs_of_a_deleted_run_are_released() -> None:
    steps = await started()
    await steps.supervise()
    key = steps.key()
    steps.shell.server.edit(*RUNS, NAMESPACE, key[1], {"metadata": {"finalizers": None}})
    steps.shell.server.remove(*RUNS, NAMESPACE, key[1])
    steps.sync()
    await steps.supervisor.supervise(key)
    assert all(not j["metadata"].get("finalizers") for j in steps.step_jobs().values())


async def test_a_status_written_meanwhile_is_read_again_not_overwritten() -> None:
    steps = await started()
    steps.sync()
    key = steps.key()
    stale = steps.store.run(key)
    assert stale is not None
    steps.shell.server.edit(*RUNS, NAMESPACE, key[1], {"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(Stale):
        await steps.supervisor.supervise(key)
    await steps.supervise()
    assert phases(steps.run())["snapshot"] == ("Running", 1)
    assert len(steps.created_step_jobs()) == 1


async def test_an_escalated_run_pauses_its_scheduledjob_through_pause_on_failure() -> None:
    """The escalation's optional pause: the Paused condition, never a spec edit."""
    shell = Shell()
    shell.create(
        "close", steps=STEPS[:1], jobTemplate=None, pauseOnFailure={"consecutiveFailures": 1}
    )
    await shell.apply("close")
    steps = Steps(shell)
    await steps.supervise()
    steps.finish(next(iter(steps.step_jobs())), "Failed")
    await steps.supervise()
    assert steps.run()["status"]["phase"] == "Compensated"  # nothing to undo: no compensate
    shell.now += timedelta(seconds=1)
    await shell.apply("close")
    conditions = {c["type"]: c["status"] for c in shell.status("close")["conditions"]}
    assert conditions["Paused"] == "True"
    assert "suspend" not in shell.current("close")["spec"]


async def test_a_deleted_heartbeat_lease_is_made_again_without_extending_the_attempt() -> None:
    steps = await started()
    await steps.supervise()
    steps.finish(next(iter(steps.step_jobs())))
    await steps.supervise()
    (second,) = [n for n, j in steps.step_jobs().items() if not j.get("status")]
    first = steps.shell.server.get(*LEASES, NAMESPACE, second)
    assert first is not None
    steps.shell.server.remove(*LEASES, NAMESPACE, second)  # a user
    steps.shell.now += timedelta(seconds=10)
    await steps.supervise()
    again = steps.shell.server.get(*LEASES, NAMESPACE, second)
    assert again is not None
    assert again["spec"]["renewTime"] == first["spec"]["renewTime"]  # the claim, not now


def test_a_heartbeat_counts_when_it_is_seen_and_only_on_the_attempts_own_lease() -> None:
    """A node whose clock runs ahead cannot defer the timeout; a Lease of that name owned by
    something else is no heartbeat."""
    seen_at = NOW
    store = RunStore(lambda key: None, clock=lambda: seen_at)

    def lease(owner: str, renew: str, version: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": "close-s1", "namespace": NAMESPACE, "resourceVersion": version,
                "labels": {"cronlease.io/run": "close-1"},
                "ownerReferences": [{"uid": owner}],
            },
            "spec": {"renewTime": renew},
        }  # fmt: skip

    attempt = StepJob("close-s1", "job-uid", "run-uid", "interest", Action.RUN, 1, JobState.ACTIVE)
    store.upsert_lease(lease("job-uid", "2099-01-01T00:00:00.000000Z", "1"))
    assert store.heartbeats(NAMESPACE, [attempt]) == {"close-s1": NOW}
    seen_at = NOW + timedelta(seconds=5)
    store.upsert_lease(lease("job-uid", "2099-01-01T00:00:00.000000Z", "2"))  # no renewal
    assert store.heartbeats(NAMESPACE, [attempt]) == {"close-s1": NOW}
    store.upsert_lease(lease("someone-else", "2099-01-01T00:00:01.000000Z", "3"))
    assert store.heartbeats(NAMESPACE, [attempt]) == {}
