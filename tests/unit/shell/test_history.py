"""Exactly once over the whole history: a model-based test of the shell on the fake API server.

Hypothesis drives one ScheduledJob through any interleaving of time passing, decisions (on a
current or a lagging model), creates and status writes whose responses are lost or refused,
Jobs succeeding and failing (with retries, or without), deletions by TTL, by users and by
history cleanup, orphaning, corrupted annotations and labels, leader crashes and handovers, and
host clock jumps, and backfill and replay requests (made, deleted, their status writes lost;
replays of the dead letters made again while the first runs). After every step:
- no slot ever had two Jobs, and no attempt two: no Job name was stored twice in the server's
  whole history, and no run has more attempts than spec.retry allows;
- the status accounts for every slot up to its cursor exactly once: runs + skips = slots, where
  the slots are counted by arithmetic on the schedule (every 10 s), not by the operator's cron;
- no run was replayed twice, however many requests replayed the dead letters.
At the end, with the faults gone and every run let finish, no Job still holds the slot-record
finalizer for a recorded slot: nothing is left that would block a namespace deletion.
"""

from __future__ import annotations

import asyncio
import math
from datetime import datetime, timedelta
from typing import Any

import orjson
from builders import CREATED, NAMESPACE
from fakeapi import FakeApiServer, _seen_by, _Watch
from harness import Shell
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from cronlease.core.decide.runrequest import parse_indexes
from cronlease.core.names.jobinfo import job_info
from cronlease.core.names.naming import (
    ANNOTATION_MAX_ATTEMPTS,
    ANNOTATION_REQUEST_INDEX,
    ANNOTATION_REQUEST_UID,
    ANNOTATION_SCHEDULED_AT,
    FINALIZER_SLOT_RECORD,
    LABEL_ATTEMPT,
    LABEL_DEAD_LETTER,
    LABEL_RETRIED,
    LABEL_RUN,
    LABEL_SCHEDULEDJOB,
    LABEL_TRIGGER,
    TRIGGER_REPLAY,
    format_time,
    parse_time,
)
from cronlease.shell.applier import Outcome
from cronlease.shell.kube import JOBS, RUNREQUESTS, SCHEDULEDJOBS
from cronlease.shell.leadership import SoleLeader

NAME = "report"
PERIOD = 10  # seconds: the schedule below
SCHEDULE = "*/10 * * * * *"
STATUS_PATH = r"/status$"
JOB_CREATE = r"/jobs$"
COMPLETE = {"conditions": [{"type": "Complete", "status": "True"}]}


def failed(now: datetime, reason: str) -> dict[str, Any]:
    condition = {"type": "Failed", "status": "True", "reason": reason}
    return {"conditions": [{**condition, "lastTransitionTime": format_time(now)}]}


def slots_until(created: datetime, until: datetime) -> int:
    """Slots of SCHEDULE in (created, until], by arithmetic."""
    return math.floor(until.timestamp() / PERIOD) - math.floor(created.timestamp() / PERIOD)


class History(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = CREATED
        self.server = FakeApiServer(clock=lambda: self.now)
        self.shells: list[Shell] = []
        self.shell = self._leader()
        self.fed = 0  # how much of the server's history the model has been fed
        self.requests = 0  # RunRequests made so far
        self.replays = 0  # of them, replays of the dead letters
        self.watch = _Watch(JOBS, NAMESPACE, LABEL_SCHEDULEDJOB)

    def _leader(self) -> Shell:
        shell = Shell(self.server, SoleLeader(f"leader-{len(self.shells)}"), self.now)
        self.shells.append(shell)
        return shell

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    # The world

    @initialize(
        history_limit=st.integers(0, 2),
        policy=st.sampled_from(["Allow", "Forbid", "Replace"]),
        deadline=st.sampled_from([None, None, None, 60, 5, 0]),
        ttl=st.sampled_from([None, None, 0]),
        attempts=st.sampled_from([3, 2, None, 1]),
        delay=st.sampled_from([0, 5, 20]),
    )
    def create(
        self,
        history_limit: int,
        policy: str,
        deadline: int | None,
        ttl: int | None,
        attempts: int | None,
        delay: int,
    ) -> None:
        self.ttl = ttl
        self.attempts = attempts
        retry = (
            {"maxAttempts": attempts, "backoff": {"initialSeconds": delay}} if attempts else None
        )
        self.shell.create(
            NAME,
            schedule=SCHEDULE,
            successfulJobsHistoryLimit=history_limit,
            failedJobsHistoryLimit=history_limit,
            concurrencyPolicy=policy,
            startingDeadlineSeconds=deadline,
            retry=retry,
        )
        self.created = self.server.get(*SCHEDULEDJOBS, NAMESPACE, NAME)["metadata"]
        self.fed = len(self.server.history)

    def sync(self) -> None:
        """The watches deliver what the server stored since the model last heard (in order)."""
        model = self.shell.model
        for _, change in self.server.history[self.fed :]:
            if change.resource == SCHEDULEDJOBS:
                if change.event_type != "DELETED":
                    model.upsert_scheduledjob(change.obj)
                continue
            if change.resource == RUNREQUESTS:
                if change.event_type == "DELETED":
                    model.delete_runrequest(change.obj)
                else:
                    model.upsert_runrequest(change.obj)
                continue
            line = _seen_by(self.watch, change)
            if line is None:
                continue
            event = orjson.loads(line)
            if event["type"] == "DELETED":
                model.delete_job(event["object"])
            else:
                model.upsert_job(event["object"])
        self.fed = len(self.server.history)

    def jobs(self) -> list[dict[str, Any]]:
        """In the order they were stored: a request's Job names hash its uid, which is random,
        and a draw must not depend on it (Hypothesis replays a failure by its draws)."""
        jobs = self.server.items(*JOBS, NAMESPACE)
        return sorted(jobs, key=lambda job: int(job["metadata"]["resourceVersion"]))

    @rule(seconds=st.integers(1, 30))
    def host_clock_jumps_back(self, seconds: int) -> None:
        """The leader's clock goes back (NTP): decisions see an earlier now than before."""
        self.shell.now = self.shell.now - timedelta(seconds=seconds)

    @rule(seconds=st.integers(3, 25), watch_lags=st.booleans())
    def time_passes_and_the_loop_runs(self, seconds: int, watch_lags: bool) -> None:
        """Time passes, then a round of the loop: every key the model woke is reconciled (the
        ScheduledJob, or the Jobs left labelled for one that does not exist); with a lagging
        watch, the model has not heard of the latest changes yet."""
        self.now += timedelta(seconds=seconds, milliseconds=137)
        self.shell.now = self.now
        if not watch_lags:
            self.sync()
        self.reconcile()

    def reconcile(self) -> bool:
        """Whether every reconcile was done (not stale: the operator decides again at once)."""
        keys = {(NAMESPACE, NAME), *self.shell.wakeups.pop_due()}
        done = True
        for key in sorted(keys):
            applied = self.run(self.shell.scheduler.reconcile(key))
            done = done and applied.outcome is Outcome.DONE
        return done

    @rule(what=st.sampled_from(["create", "status"]), lose=st.booleans())
    def next_write_fails(self, what: str, lose: bool) -> None:
        """The next such write fails: refused (500), or done but its response lost."""
        path = JOB_CREATE if what == "create" else STATUS_PATH
        skip = 1 if what == "create" else 0  # a create may follow the template's dry run
        if lose:
            self.server.lose("PATCH" if what == "status" else "POST", path, skip=skip)
        else:
            self.server.fail("PATCH" if what == "status" else "POST", path, 500, skip=skip)

    @rule()
    def status_write_conflicts(self) -> None:
        """Someone else writes the ScheduledJob: the leader's next status write gets a 409."""
        labels = {"touched": str(len(self.server.history))}
        self.server.edit(*SCHEDULEDJOBS, NAMESPACE, NAME, {"metadata": {"labels": labels}})

    @precondition(lambda self: bool(self.jobs()))
    @rule(data=st.data())
    def a_job_finishes(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.jobs()))
        name = job["metadata"]["name"]
        if job.get("status", {}).get("conditions"):
            return  # finished already: a Job's end is final
        self.server.edit(*JOBS, NAMESPACE, name, {"status": COMPLETE})
        if self.ttl == 0:  # the TTL controller, at once
            self.server.remove(*JOBS, NAMESPACE, name)

    @precondition(lambda self: bool(self.jobs()))
    @rule(data=st.data(), reason=st.sampled_from(["BackoffLimitExceeded", "PodFailurePolicy"]))
    def a_job_fails(self, data: st.DataObject, reason: str) -> None:
        job = data.draw(st.sampled_from(self.jobs()))
        name = job["metadata"]["name"]
        if job.get("status", {}).get("conditions"):
            return  # finished already: a Job's end is final
        self.server.edit(*JOBS, NAMESPACE, name, {"status": failed(self.now, reason)})
        if self.ttl == 0:
            self.server.remove(*JOBS, NAMESPACE, name)

    @precondition(lambda self: bool(self.jobs()))
    @rule(data=st.data())
    def a_user_deletes_a_job(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.jobs()))
        self.server.remove(*JOBS, NAMESPACE, job["metadata"]["name"])

    @precondition(lambda self: bool(self.jobs()))
    @rule(data=st.data(), how=st.sampled_from(["orphan", "annotation", "label", "unlabel"]))
    def a_user_edits_a_job(self, data: st.DataObject, how: str) -> None:
        job = data.draw(st.sampled_from(self.jobs()))
        patch: dict[str, Any] = {
            "orphan": {"metadata": {"ownerReferences": None}},
            "annotation": {"metadata": {"annotations": {ANNOTATION_SCHEDULED_AT: "soon"}}},
            "label": {"metadata": {"labels": {LABEL_SCHEDULEDJOB: "someone-else"}}},
            "unlabel": {"metadata": {"labels": {LABEL_SCHEDULEDJOB: None}}},
        }[how]
        held = FINALIZER_SLOT_RECORD in job["metadata"].get("finalizers", [])
        if held and how in ("label", "unlabel"):
            # The fencing policy refuses these on a Job that holds the finalizer (for the moment
            # between its creation and its record): with neither owner reference nor label, a
            # cold leader could neither record nor safely release it (docs/design-notes.md).
            # Orphaning stays allowed (users and the garbage collector do it).
            return
        self.server.edit(*JOBS, NAMESPACE, job["metadata"]["name"], patch)

    @precondition(lambda self: self.requests < 4)  # their targets run one by one at the end
    @rule(
        back=st.integers(1, 12),
        length=st.integers(0, 4),
        policy=st.sampled_from(["Forbid", "Allow"]),
        status_lost=st.booleans(),
    )
    def a_user_asks_for_a_backfill(
        self, back: int, length: int, policy: str, status_lost: bool
    ) -> None:
        """A RunRequest for a past window of up to 5 slots (some before the ScheduledJob was
        created); the next write of a request's status may be lost."""
        end = self.now - timedelta(seconds=PERIOD * back)
        start = end - timedelta(seconds=PERIOD * length)
        window = {"from": format_time(start), "to": format_time(end)}
        self.requests += 1
        spec = {"scheduledJobName": NAME, "backfill": window, "concurrencyPolicy": policy}
        self.server.put(
            {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "RunRequest",
                "metadata": {"name": f"fill-{self.requests}", "namespace": NAMESPACE},
                "spec": spec,
            }
        )
        if status_lost:
            self.server.lose("PATCH", r"runrequests/.*/status$")

    def unfinished(self) -> list[dict[str, Any]]:
        return [job for job in self.jobs() if not (job.get("status") or {}).get("conditions")]

    @precondition(lambda self: self.replays < 3 and self.attempts is not None)
    @rule(
        data=st.data(),
        policy=st.sampled_from(["Forbid", "Allow"]),
        status_lost=st.booleans(),
        twice=st.booleans(),
    )
    def a_user_replays_the_dead_letters(
        self, data: st.DataObject, policy: str, status_lost: bool, twice: bool
    ) -> None:
        """A run fails for good (a podFailurePolicy FailJob: no retry, a dead letter), and the
        user runs `kubectl cronlease replay --dead-letters`, with `twice` the same again at once
        (another one while the first still runs comes from a later step)."""
        unfinished = self.unfinished()
        if unfinished and data.draw(st.booleans(), label="a run fails for good"):
            job = data.draw(st.sampled_from(unfinished))
            failure = {"status": failed(self.now, "PodFailurePolicy")}
            self.server.edit(*JOBS, NAMESPACE, job["metadata"]["name"], failure)
        for _ in range(2 if twice else 1):
            self.requests += 1
            self.replays += 1
            spec = {
                "scheduledJobName": NAME,
                "replay": {"deadLetters": True},
                "concurrencyPolicy": policy,
            }
            self.server.put(
                {
                    "apiVersion": "cronlease.io/v1alpha1",
                    "kind": "RunRequest",
                    "metadata": {"name": f"again-{self.requests}", "namespace": NAMESPACE},
                    "spec": spec,
                }
            )
        if status_lost:
            self.server.lose("PATCH", r"runrequests/.*/status$")

    @precondition(lambda self: bool(self.server.items(*RUNREQUESTS, NAMESPACE)))
    @rule(data=st.data())
    def a_user_deletes_a_request(self, data: st.DataObject) -> None:
        request = data.draw(st.sampled_from(self.server.items(*RUNREQUESTS, NAMESPACE)))
        self.server.remove(*RUNREQUESTS, NAMESPACE, request["metadata"]["name"])

    @rule(crash=st.booleans())
    def a_new_leader(self, crash: bool) -> None:
        """A crash (or a graceful handover): the next leader starts from a listing, cold."""
        self.run(self.shell.applier.drain())
        if not crash:
            self.run(self.shell.leadership.release())
        successor = self.shell.successor(SoleLeader(f"leader-{len(self.shells)}"))
        self.shells.append(successor)
        self.shell = successor
        self.shell.now = self.now
        self.fed = len(self.server.history)

    # What must always hold

    @invariant()
    def no_slot_ever_had_two_jobs(self) -> None:
        names = self.shell.created_jobs()
        assert len(names) == len(set(names)), sorted(names)

    @invariant()
    def no_run_has_more_attempts_than_allowed(self) -> None:
        attempts: dict[str, set[str]] = {}
        for _, change in self.server.history:
            if change.resource == JOBS and change.event_type == "ADDED":
                labels = change.obj["metadata"].get("labels") or {}
                run = labels.get(LABEL_RUN, change.obj["metadata"]["name"])
                attempts.setdefault(run, set()).add(labels.get(LABEL_ATTEMPT, "1"))
        for run, numbers in attempts.items():
            assert len(numbers) <= (self.attempts or 1), (run, sorted(numbers))

    @invariant()
    def no_run_was_replayed_twice(self) -> None:
        """Each replay's run is a target of its request (the request's status.targets, as the
        server stored it, names the run it replays); no run has two replays. Only requests for
        every dead letter are made here, and a replayed dead letter is one no more."""
        targets: dict[str, list[str]] = {}
        replays: dict[str, list[str]] = {}
        for _, change in self.server.history:
            if change.resource == RUNREQUESTS and change.event_type != "DELETED":
                entries = (change.obj.get("status") or {}).get("targets")
                if isinstance(entries, list):
                    targets[change.obj["metadata"]["uid"]] = [entry["run"] for entry in entries]
            if change.resource != JOBS or change.event_type != "ADDED":
                continue
            metadata = change.obj["metadata"]
            labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
            if labels.get(LABEL_TRIGGER) != TRIGGER_REPLAY or labels.get(LABEL_ATTEMPT, "1") != "1":
                continue
            uid, index = annotations[ANNOTATION_REQUEST_UID], annotations[ANNOTATION_REQUEST_INDEX]
            run = targets[uid][int(index)]
            replays.setdefault(run, []).append(metadata["name"])
        twice = {run: jobs for run, jobs in replays.items() if len(jobs) > 1}
        assert not twice, twice

    @invariant()
    def every_slot_up_to_the_cursor_is_accounted_for_once(self) -> None:
        obj = self.server.get(*SCHEDULEDJOBS, NAMESPACE, NAME)
        status = (obj or {}).get("status") or {}
        processed = parse_time(status.get("processedUntil"))
        if processed is None:
            return
        created = parse_time(self.created["creationTimestamp"])
        assert created is not None
        skipped = sum((status.get("slotsSkipped") or {}).values())
        assert status["runsCreated"] + skipped == slots_until(created, processed), status
        assert status["runsCreated"] <= len(self.shell.created_jobs())

    def teardown(self) -> None:
        try:
            if hasattr(self, "created"):
                self.server.faults.clear()
                # Every run is let finish: whatever is active succeeds, attempts still due are
                # made (time passes beyond any delay) and succeed, until nothing is left to do;
                # the later rounds make no new slot due, only end the runs (a backfill's one by
                # one) and release them, until a round changes nothing and no decision in it was
                # stale (the operator decides again at once after one).
                for round_ in range(100):
                    before = len(self.server.history)
                    self.sync()
                    settled = self.reconcile()
                    self.sync()
                    for job in self.jobs():
                        if not job.get("status", {}).get("conditions"):
                            name = job["metadata"]["name"]
                            self.server.edit(*JOBS, NAMESPACE, name, {"status": COMPLETE})
                    if round_ < 3:
                        self.now += timedelta(seconds=30)
                        self.shell.now = self.now
                    elif settled and len(self.server.history) == before:
                        break
                self.sync()
                self.nothing_recorded_is_held()
                self.no_attempt_was_lost()
                self.every_target_ran()
                self.no_run_was_replayed_twice()  # the requests' targets have run by now
        finally:
            for shell in self.shells:
                self.run(shell.applier.drain())
                Shell.made.remove(shell)
            self.loop.close()

    def no_attempt_was_lost(self) -> None:
        """Every failed attempt with attempts left was retried (and marked so), whatever else
        happened; only a user's deletion, orphaning or corruption may have ended a run sooner."""
        for job in self.jobs():
            metadata = job["metadata"]
            labels = metadata.get("labels") or {}
            conditions = (job.get("status") or {}).get("conditions") or []
            failed = [c for c in conditions if c.get("type") == "Failed"]
            if not failed or failed[0].get("reason") == "PodFailurePolicy":
                continue
            if not job_info(job).trusted:
                continue  # orphaned or corrupted by a user: no longer the run's (as designed)
            allowed = int((metadata.get("annotations") or {}).get(ANNOTATION_MAX_ATTEMPTS, 0))
            if int(labels.get(LABEL_ATTEMPT, "1")) < allowed:
                assert labels.get(LABEL_RETRIED) == "true", metadata

    def every_target_ran(self) -> None:
        """A request still there has ended; if it completed, each of its targets had a Job."""
        made: dict[str, set[int]] = {}
        for _, change in self.server.history:
            if change.resource == JOBS and change.event_type == "ADDED":
                annotations = change.obj["metadata"].get("annotations") or {}
                if ANNOTATION_REQUEST_UID in annotations:
                    made.setdefault(annotations[ANNOTATION_REQUEST_UID], set()).add(
                        int(annotations[ANNOTATION_REQUEST_INDEX])
                    )
        for request in self.server.items(*RUNREQUESTS, NAMESPACE):
            status = request.get("status") or {}
            assert status.get("phase") in ("Complete", "Failed"), request
            if status["phase"] == "Complete":
                skipped = parse_indexes(status.get("skippedIndexes"))
                expected = set(range(status["total"])) - skipped
                assert made.get(request["metadata"]["uid"], set()) == expected, request
                counted = status["succeeded"] + status["failed"] + len(skipped)
                assert counted == status["total"], request

    def nothing_recorded_is_held(self) -> None:
        obj = self.server.get(*SCHEDULEDJOBS, NAMESPACE, NAME)
        processed = parse_time(((obj or {}).get("status") or {}).get("processedUntil"))
        for job in self.jobs():
            metadata = job["metadata"]
            if FINALIZER_SLOT_RECORD not in (metadata.get("finalizers") or []):
                continue
            if (metadata.get("labels") or {}).get(LABEL_DEAD_LETTER) == "true":
                continue  # kept, held, until its retention passes (or its ScheduledJob goes)
            assert ANNOTATION_REQUEST_UID not in (metadata.get("annotations") or {}), metadata
            slot = parse_time((metadata.get("annotations") or {}).get(ANNOTATION_SCHEDULED_AT))
            assert processed is not None, metadata
            assert slot is not None, metadata
            assert slot > processed, metadata


History.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
test_the_whole_history = History.TestCase
