"""Every run held to the slot's standard: a model-based test of the supervisor shell (issue 33).

Hypothesis drives one multi-step Run through any interleaving of time passing, supervisions, the
step Jobs' pods finishing or failing or renewing their heartbeat, writes and deletes whose
responses are lost or refused, creations a full ResourceQuota refuses, users deleting heartbeat
Leases, removing step Jobs' owner references, deleting step Jobs in the background, deleting the
Run itself, pods that take their time to stop after a foreground deletion, and operator restarts
(a cold store) faster than the heartbeat timeout. After every step:
- no attempt's Job was ever created twice, and no step ran more attempts than its retry allows;
- a step never has two live attempts (a live Job: it exists and has not finished, pods
  included: a Job deleted in the foreground stays until its pods are gone);
- no compensation runs while a step's Job lives;
- a final Run that has let go (or a gone Run) leaves no step Job alive;
- no supervision leaves an attempt Running past its heartbeat deadline, counted from its claim
  or its pod's last real renewal, whatever restarts happened in between.
At the end, with the faults gone and every pod let finish, the Run ends within a bound: 40
rounds of 10 s (each a supervision), and then holds nothing: no step Job keeps the slot-record
finalizer, the Run no longer holds its supervision finalizer, no step Job lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import timedelta
from typing import Any

import pytest
from builders import CREATED, NAMESPACE, job_template
from fakeapi import FOREGROUND, FakeApiServer
from harness import NOW, Shell
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_supervisor import Steps

from cronlease.core.bodies.stepjob import LABEL_ACTION, LABEL_STEP
from cronlease.core.decide.supervision import FINISHED_RUN
from cronlease.core.names.naming import (
    FINALIZER_SLOT_RECORD,
    FINALIZER_SUPERVISION,
    LABEL_ATTEMPT,
    format_time,
    micro_time,
    parse_time,
)
from cronlease.shell.kube import JOBS, LEASES, RUNS
from cronlease.shell.leadership import SoleLeader
from cronlease.shell.writer import RetryLater, Stale

HEARTBEAT = 30
STEPS = ("snapshot", "report", "interest", "publish")
GRACE = 30  # the pods' terminationGracePeriodSeconds (the templates leave the default)
# A rule that ends most stories acts once in RARE + 1 draws: the others get to happen first.
RARE = 7
BOUND_ROUNDS = 40
# A long run: CRONLEASE_RUN_HISTORY_EXAMPLES=5000 (make test runs the default).
EXAMPLES = int(os.environ.get("CRONLEASE_RUN_HISTORY_EXAMPLES", "300"))


def done(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Complete", "Failed") for c in conditions)


class RunHistory(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = CREATED  # the ScheduledJob's creation; its first slot is due at NOW
        self.server = FakeApiServer(clock=lambda: self.now)
        self.server.collecting = False  # pods stop when the test says so
        self.shell = Shell(self.server, SoleLeader("leader-0"), NOW)
        self.steps: Steps | None = None
        self.renewed: dict[str, Any] = {}  # step Job -> its pod's last real renewal
        self.restarts = 0
        # Jobs a user deleted in the background, until they are gone; then until when their pods
        # may run.
        self.background: dict[str, dict[str, Any]] = {}
        self.ghosts: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.up = True  # the operator runs

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    @initialize(
        on_failure=st.sampled_from(["Compensate", "Stop"]),
        heartbeat=st.booleans(),
        attempts=st.integers(1, 3),
    )
    def a_run_starts(self, on_failure: str, heartbeat: bool, attempts: int) -> None:
        retry = {"maxAttempts": attempts, "backoff": {"initialSeconds": 5}}
        beat = {"heartbeat": {"timeoutSeconds": HEARTBEAT}} if heartbeat else {}
        undo = {"jobTemplate": job_template(), "retry": {"maxAttempts": 2}}
        self.attempts = attempts
        self.shell.create(
            "close",
            jobTemplate=None,
            onFailure=on_failure,
            steps=[
                {"name": "snapshot", "jobTemplate": job_template(), "compensate": undo},
                {"name": "report", "jobTemplate": job_template(), "retry": retry},
                {
                    "name": "interest",
                    "dependsOn": ["snapshot"],
                    "jobTemplate": job_template(),
                    "retry": retry,
                    **beat,
                },
                {"name": "publish", "dependsOn": ["interest"], "jobTemplate": job_template()},
            ],
        )
        self.now = NOW
        self.run(self.shell.apply("close"))
        self.steps = Steps(self.shell)
        self.key = self.steps.key()
        self.steps.sync()

    # The world

    def jobs(self) -> list[dict[str, Any]]:
        """Step Jobs in the order they were stored (a draw must not depend on random uids)."""
        jobs = [
            job
            for job in self.server.items(*JOBS, NAMESPACE)
            if LABEL_STEP in (job["metadata"].get("labels") or {})
        ]
        return sorted(jobs, key=lambda job: int(job["metadata"]["resourceVersion"]))

    def present(self) -> list[dict[str, Any]]:
        """Unfinished step Jobs in the server."""
        return [job for job in self.jobs() if not done(job)]

    def live(self) -> list[dict[str, Any]]:
        """Step Jobs whose pods may run: unfinished ones in the server, and those deleted in the
        background and gone since less than their pods' grace period (the garbage collector
        deletes the pods once the Job is gone; they stop within it)."""
        present = self.present()
        names = {job["metadata"]["name"] for job in self.jobs()}
        for name, job in list(self.background.items()):
            if name in names:
                continue
            self.ghosts.setdefault(name, (self.now + timedelta(seconds=GRACE), job))
            del self.background[name]
        ghosts = [job for until, job in self.ghosts.values() if until > self.now]
        return [*present, *ghosts]

    def running(self) -> list[dict[str, Any]]:
        """Live and not being deleted: their pods can still finish, fail and renew."""
        return [job for job in self.present() if not job["metadata"].get("deletionTimestamp")]

    def the_run(self) -> dict[str, Any] | None:
        return self.server.get(*RUNS, *self.key)

    def watched(self) -> None:
        """The watches deliver what changed (within milliseconds, here at once)."""
        assert self.steps is not None
        self.steps.sync()

    def reacted(self) -> None:
        """The watches deliver the change, and the keyed loop supervises the Run it woke, unless
        the operator is down."""
        if self.up:
            self.the_supervisor_runs()
        else:
            self.watched()

    @rule(seconds=st.integers(1, 40))
    def time_passes(self, seconds: int) -> None:
        """Time passes; a timer the supervision asked for (a heartbeat's deadline, a retry's
        backoff) may have come due meanwhile: the loop supervises the Run."""
        self.pass_time(seconds)
        self.reacted()

    def pass_time(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds, milliseconds=211)
        self.shell.now = self.now

    @rule()
    def the_supervisor_runs(self) -> None:
        assert self.steps is not None
        self.watched()
        wake_at = None
        with contextlib.suppress(RetryLater, Stale):  # the loop retries it (a backoff, or now)
            wake_at = self.run(self.steps.supervisor.supervise(self.key))
            self.watched()
            self.no_supervision_extends_a_heartbeat(wake_at)
        self.watched()

    @rule(
        what=st.sampled_from(
            [
                ("POST", r"/jobs$"),
                ("POST", r"/leases$"),
                ("PATCH", r"/runs/[^/]+/status$"),
                ("DELETE", r"/jobs/"),
                ("PATCH", r"/jobs/"),
                ("PATCH", r"/runs/[^/]+$"),
            ]
        ),
        lose=st.booleans(),
    )
    def the_next_write_fails(self, what: tuple[str, str], lose: bool) -> None:
        """Refused (500), or done and its response lost (a kill right after it, say)."""
        method, path = what
        if lose:
            self.server.lose(method, path)
        else:
            self.server.fail(method, path, 500)

    @rule(times=st.integers(1, 3), chance=st.integers(0, RARE))
    def a_quota_refuses_step_jobs(self, times: int, chance: int) -> None:
        """Rarely: a refused creation fails its attempt, and often its run."""
        if chance < RARE:
            return
        self.server.fail("POST", r"/jobs$", 403, "exceeded quota: pods=10", times=times)

    @rule(step=st.sampled_from(STEPS), outcome=st.sampled_from(["Complete", "Failed"]))
    def a_pod_ends(self, step: str, outcome: str) -> None:
        """The newest running Job of `step` ends (if it has one)."""
        running = [j for j in self.running() if j["metadata"]["labels"][LABEL_STEP] == step]
        if not running:
            return
        job = running[-1]
        condition = {"type": outcome, "status": "True", "lastTransitionTime": format_time(self.now)}
        self.server.edit(
            *JOBS, NAMESPACE, job["metadata"]["name"], {"status": {"conditions": [condition]}}
        )
        self.reacted()

    @precondition(lambda self: bool(self.running()))
    @rule(data=st.data())
    def a_pod_renews_its_heartbeat(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(self.running()))["metadata"]["name"]
        if self.server.get(*LEASES, NAMESPACE, name) is None:
            return  # 404: made again by the supervisor, renewed at the next turn
        self.server.edit(*LEASES, NAMESPACE, name, {"spec": {"renewTime": micro_time(self.now)}})
        self.renewed[name] = self.now
        self.reacted()

    @precondition(lambda self: bool(self.server.items(*LEASES, NAMESPACE)))
    @rule(data=st.data())
    def a_user_deletes_a_heartbeat_lease(self, data: st.DataObject) -> None:
        lease = data.draw(st.sampled_from(self.server.items(*LEASES, NAMESPACE)))
        self.server.remove(*LEASES, NAMESPACE, lease["metadata"]["name"])
        self.reacted()

    @precondition(lambda self: bool(self.present()))
    @rule(data=st.data())
    def a_user_orphans_a_step_job(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.present()))
        patch = {"metadata": {"ownerReferences": None}}
        self.server.edit(*JOBS, NAMESPACE, job["metadata"]["name"], patch)
        self.reacted()

    @precondition(lambda self: bool(self.present()))
    @rule(data=st.data())
    def a_user_deletes_a_step_job(self, data: st.DataObject) -> None:
        """`kubectl delete job` (background): its pods run on until the Job is gone."""
        job = data.draw(st.sampled_from(self.present()))
        if not job["metadata"].get("deletionTimestamp"):  # a deletion of its own
            self.background[job["metadata"]["name"]] = job
        self.server.remove(*JOBS, NAMESPACE, job["metadata"]["name"])
        self.reacted()

    @rule()
    def pods_stop(self) -> None:
        """The garbage collector finds the pods of every foreground deletion gone."""
        self.server.collect()
        self.reacted()

    @precondition(
        lambda self: (
            (run := self.the_run()) is not None and not run["metadata"].get("deletionTimestamp")
        )
    )
    @rule(chance=st.integers(0, RARE))
    def a_user_deletes_the_run(self, chance: int) -> None:
        """Rarely: it ends the story (its steps stop, what finished is compensated)."""
        if chance < RARE:
            return
        self.server.remove(*RUNS, *self.key)
        self.reacted()

    @rule(down_for=st.integers(0, 40))
    def the_operator_restarts(self, down_for: int) -> None:
        """A crash, a rolling update, an OOM: nothing supervises for `down_for` seconds (less
        than a heartbeat's timeout, or more); then a new process, its store cold, filled by
        listing, supervises at once."""
        self.run(self.shell.applier.drain())
        self.up = False
        self.pass_time(down_for)
        self.restarts += 1
        self.up = True
        self.steps = Steps(self.shell)
        self.reacted()

    # What must always hold

    @invariant()
    def no_attempt_was_made_twice_nor_beyond_its_retries(self) -> None:
        names = [
            change.obj["metadata"]["name"]
            for _, change in self.server.history
            if change.resource == JOBS and change.event_type == "ADDED"
        ]
        assert len(names) == len(set(names)), sorted(names)
        for _, change in self.server.history:
            if change.resource != JOBS or change.event_type != "ADDED":
                continue
            labels = change.obj["metadata"]["labels"]
            if labels[LABEL_ACTION] == "run" and labels[LABEL_STEP] in ("report", "interest"):
                assert int(labels[LABEL_ATTEMPT]) <= self.attempts, labels

    @invariant()
    def a_step_never_has_two_live_attempts(self) -> None:
        seen: dict[tuple[str, str], str] = {}
        for job in self.live():
            labels = job["metadata"]["labels"]
            what = (labels[LABEL_STEP], labels[LABEL_ACTION])
            assert what not in seen, (what, seen[what], job["metadata"]["name"])
            seen[what] = job["metadata"]["name"]

    @invariant()
    def no_compensation_beside_a_live_step(self) -> None:
        actions = {job["metadata"]["labels"][LABEL_ACTION] for job in self.live()}
        assert not {"run", "compensate"} <= actions, [j["metadata"]["name"] for j in self.live()]

    @invariant()
    def a_run_that_let_go_leaves_nothing_alive(self) -> None:
        run = self.the_run()
        if run is not None:
            phase = (run.get("status") or {}).get("phase")
            held = FINALIZER_SUPERVISION in (run["metadata"].get("finalizers") or [])
            if phase not in FINISHED_RUN or held:
                return
        assert self.live() == [], [job["metadata"]["name"] for job in self.live()]

    def no_supervision_extends_a_heartbeat(self, wake_at: Any) -> None:
        """Checked right after each supervision: a running attempt whose pod last renewed (or
        was claimed) more than the timeout ago is no longer Running, and the supervision asks to
        be woken no later than the deadline of one that still runs, whatever restarts happened
        since its last renewal."""
        run = self.the_run()
        if run is None:
            return
        for entry in (run.get("status") or {}).get("steps") or []:
            if entry.get("name") != "interest" or entry.get("phase") != "Running":
                continue
            spec = run["spec"]["steps"][2]
            if not spec.get("heartbeat"):
                continue
            name = next(
                (
                    job["metadata"]["name"]
                    for job in self.live()
                    if job["metadata"]["labels"][LABEL_STEP] == "interest"
                    and job["metadata"]["labels"][LABEL_ATTEMPT] == str(entry["attempt"])
                ),
                None,
            )
            if name is None:
                continue  # not created yet, or gone: no heartbeat to judge
            claimed = parse_time(entry.get("startedAt"))
            assert claimed is not None
            last = max(claimed, self.renewed.get(name, claimed))
            deadline = last + timedelta(seconds=HEARTBEAT)
            assert self.now <= deadline, (
                name,
                last,
                self.now,
                entry,
                self.server.get(*JOBS, NAMESPACE, name),
                self.server.get(*LEASES, NAMESPACE, name),
                self.steps.store.jobs_of(self.key) if self.steps else None,
            )
            assert wake_at is not None, name
            assert wake_at <= deadline, (name, wake_at, deadline)

    def teardown(self) -> None:
        try:
            if self.steps is not None:
                self.let_it_end()
        finally:
            self.run(self.shell.applier.drain())
            if self.shell in Shell.made:
                Shell.made.remove(self.shell)
            self.loop.close()

    def current(self) -> list[dict[str, Any]]:
        """The running Jobs of the attempts the Run's status runs: a cancelled or abandoned
        attempt's pod may run for ever, unless the supervisor deletes its Job."""
        run = self.the_run()
        status = (run or {}).get("status") or {}
        attempts = set()
        for entry in status.get("steps") or []:
            for action, part in (("run", entry), ("compensate", entry.get("compensation"))):
                if isinstance(part, dict) and part.get("phase") == "Running":
                    attempts.add((entry["name"], action, str(part["attempt"])))
        return [
            job
            for job in self.running()
            if (
                job["metadata"]["labels"][LABEL_STEP],
                job["metadata"]["labels"][LABEL_ACTION],
                job["metadata"]["labels"][LABEL_ATTEMPT],
            )
            in attempts
        ]

    def let_it_end(self) -> None:
        """The faults stop and the current attempts' pods behave: the Run ends within
        BOUND_ROUNDS rounds, and then holds nothing and leaves nothing alive."""
        assert self.steps is not None
        self.server.faults.clear()
        for _ in range(BOUND_ROUNDS):
            self.the_supervisor_runs()
            for job in self.current():
                name = job["metadata"]["name"]
                if self.server.get(*LEASES, NAMESPACE, name) is not None:
                    stamp = {"spec": {"renewTime": micro_time(self.now)}}
                    self.server.edit(*LEASES, NAMESPACE, name, stamp)
                    self.renewed[name] = self.now
                condition = {"type": "Complete", "status": "True"}
                self.server.edit(*JOBS, NAMESPACE, name, {"status": {"conditions": [condition]}})
            self.server.collect()
            self.watched()
            run = self.the_run()
            let_go = run is None or (
                (run.get("status") or {}).get("phase") in FINISHED_RUN
                and FINALIZER_SUPERVISION not in (run["metadata"].get("finalizers") or [])
            )
            if let_go and not self.live():  # pods of a Job gone in the background stop too
                break
            self.pass_time(10)
        else:
            raise AssertionError(f"the run did not end in {BOUND_ROUNDS} rounds: {self.the_run()}")
        self.the_supervisor_runs()  # the last releases
        self.the_supervisor_runs()
        assert self.live() == [], (self.the_run(), self.ghosts, self.now)
        for job in self.jobs():
            finalizers = job["metadata"].get("finalizers") or []
            assert FINALIZER_SLOT_RECORD not in finalizers, job["metadata"]
            assert FOREGROUND not in finalizers, job["metadata"]


RunHistory.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=60, deadline=None
)
# About 0.15 s an example on one core (5,000 in 12 to 14 minutes): the suite's 300 s timeout
# holds the default run; a long one gets room in proportion.
RunHistory.TestCase.pytestmark = pytest.mark.timeout(max(300, int(EXAMPLES * 0.5)))
test_every_run_of_a_multi_step_run = RunHistory.TestCase
