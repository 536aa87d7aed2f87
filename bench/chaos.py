"""make chaos: faults on a schedule against 3 replicas and many ScheduledJobs, then an audit.

Faults, in rotation: SIGKILL the leader, SIGSTOP it for longer than its lease (then SIGCONT),
restart kube-apiserver (which drops every watch mid-stream), restart etcd, SIGKILL a standby, a
replica stuck in a crash loop, a user deleting new Jobs the moment they appear (before their
slot is recorded), and latency on the leader's Lease path: each replica reaches the API server
through its own fault proxy (hack/devcluster/faultproxy.py), and the leader's proxy holds its
Lease GETs and PUTs, and some of its Job creates, for a while, so it loses the Lease to a standby
while creates it sent as the leader are still on their way (the fence must refuse them). Killed
replicas come back after two seconds, as a Deployment would bring them back.

Against everything outside the spec all the time, not in rotation: a fifth of the
ScheduledJobs have `ttlSecondsAfterFinished: 0` (the TTL controller deletes each Job as soon as
it finishes), another fifth keep no history (successful and failed limits 0), a fifth run
multi-step Runs (snapshot, interest, publish; interest fails chosen attempts and has a
heartbeat nobody renews, so a slow Job controller gets it restarted), and a fifth have
`spec.retry` with pods that fail chosen attempts (some runs succeed on attempt 2 or 3, some
are dead-lettered after 3, some fail with an exit code their podFailurePolicy calls final), so
the faults above also hit runs between attempts; while user-deletes is on, the user also deletes
failed attempts as their runs wait for the next, which must end those runs.
Meanwhile RunRequests, on a timer (REQUEST_FIRST): backfills of a few past slots and replays of
dead letters, Forbid or Allow, some deleted midway (cancelled).
Issue 33's faults on multi-step runs, in the same rotation: a user meddling with running step
Jobs (deleting them in the background, removing their owner references, deleting their
heartbeat Leases), the leader's Job DELETEs lost or refused, a ResourceQuota that refuses every
new Job, every replica restarted three times faster than the steps' heartbeat timeout (a new
leader with a cold store each time), two replays of one ScheduledJob's dead letters at once,
and a user deleting a running Run.

The auditor watches from outside: every Job's events (re-listing after each outage), and the
Lease's holder and token. At the end, for each ScheduledJob, every slot between its creation and
its status.processedUntil must have exactly one Job ever created (never two uids) or a skip for a
reason the spec allows, and no Job whose slot is recorded may still hold the slot-record
finalizer. The slots expected come from the auditor's own oracle, not the operator's `Schedule`:
the schedule fires every 10 s of UTC, so its slots are the multiples of 10 s since the epoch.
Every run's attempts are audited too (hack/chaos_runs.py): none twice, no gap, none beyond
maxAttempts, none lost, every run out of attempts a dead letter.
Every request target too (hack/chaos_requests.py): one run per (request, index), every target
of a Complete request run and counted, none started after a cancellation, none left held.
Every step attempt of the multi-step Runs too (hack/chaos_steps.py): none made twice, no gap,
none beyond maxAttempts, no step started again after its Run recorded it succeeded, no
compensation of a step that never succeeded, no run stuck without an escalation once its step
Jobs ended, no heartbeat loss noticed late; and their pods, watched from outside
(hack/chaos_pods.py): never two attempts of a step alive at once, no compensation beside a
step's pod, none alive after its Run let go. No dead letter replayed twice across requests.
The audit goes to bench/results/chaos-latest.md for people and chaos-latest.json for tests.

    make chaos                                   # 3 minutes
    python bench/chaos.py --duration 1800        # the full run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# The audits of RunRequests (hack/chaos_requests.py) and of runs and attempts (chaos_runs.py).
from bench_results import save_results
from chaos_pods import MUST_BE_ZERO as PODS_MUST_BE_ZERO
from chaos_pods import Attempt, PodLife, audit_pods, pod_life
from chaos_requests import MUST_BE_ZERO as REQUESTS_MUST_BE_ZERO
from chaos_requests import Request, audit_requests
from chaos_runs import (
    ENDED,
    LABEL_DEAD_LETTER,
    Seen,
    UserDeleted,
    audit_runs,
    parse_instant,
    runs_of,
    verdict,
)
from chaos_runs import seen as first_sighting
from chaos_steps import FINAL as STEPS_FINAL
from chaos_steps import MUST_BE_ZERO as STEPS_MUST_BE_ZERO
from chaos_steps import RunSeen, StepSeen, audit_steps, is_step_job, step_seen

# The operator's API plumbing only (a client, a list-then-watch); what the audit expects, it
# works out for itself.
from cronlease.shell.kube import (
    JOBS,
    LEASES,
    NAMESPACES,
    RUNREQUESTS,
    RUNS,
    SCHEDULEDJOBS,
    KubeApi,
    connect,
    resource_path,
)
from cronlease.shell.listwatch import ListWatch
from devcluster import faultproxy
from devcluster.cluster import Cluster, cluster_dir, ensure_cluster
from devcluster.faultproxy import FaultProxy, Rule
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.kwok import kwok_pod_template
from devcluster.replica import ELECTION, LEASE, OPERATOR_NAMESPACE, REPO, OperatorProcess

RUN_LABEL = "chaos.cronlease.io/run"
POPULATION_LABEL = "chaos.cronlease.io/population"
SCHEDULE = "*/10 * * * * *"
PERIOD = 10  # the oracle: SCHEDULE in UTC fires at every multiple of 10 s since the epoch
DEADLINE = 60  # longer than any outage injected here, so no slot may be lost
CURSOR_SLACK = 5.0  # at the end, processedUntil may lag the clock by this much, not more
ALLOWED_SKIPS = {"DeadlineExceeded", "ConcurrencyForbid"}
# Spelled out, not imported from the operator, so a rename there shows up in the audit.
FINALIZER = "cronlease.io/slot-record"
SUPERVISION = "cronlease.io/supervision"
PODS = ("v1", "pods")
QUOTAS = ("v1", "resourcequotas")
FAULTS = [
    "kill-leader",
    "pause-leader",
    "restart-apiserver",
    "restart-etcd",
    "kill-standby",
    "crash-loop",
    "user-deletes",
    "lease-latency",
    # Issue 33: what users, quotas and restarts do to multi-step runs.
    "step-meddling",
    "lost-deletes",
    "step-quota",
    "restart-all",
    "replay-twice",
    "delete-run",
]
# ScheduledJob i belongs to POPULATIONS[i % 5]: the Jobs of "ttl-zero" are deleted by the TTL
# controller once they finish, those of "history-zero" by the operator's history cleanup; those
# of "retry" fail chosen attempts and are retried (RETRY); "steps" run each slot as a multi-step
# Run (STEPS), whose middle step fails chosen attempts and has a heartbeat nobody renews.
POPULATIONS = ("ttl-zero", "history-zero", "default", "retry", "steps")
# The multi-step ScheduledJobs in turn: the middle step fails no attempt, attempt 1 (succeeds on
# 2), or both (the run compensates its first step). Its heartbeat (no agent renews it) restarts
# it whenever the Job controller is slow to finish it.
STEP_VARIANTS: tuple[tuple[int, ...], ...] = ((), (1,), (1, 2))
STEP_HEARTBEAT = 20
# Up to 3 attempts, the second 1 s after the first fails, the third 2 s after the second: a run
# that fails twice is over within a period.
RETRY = {"maxAttempts": 3, "backoff": {"initialSeconds": 1, "factor": 2}}
NOT_RETRYABLE_EXIT_CODE = 42
# The retry ScheduledJobs in turn (kwok_pod_template's arguments): succeed on attempt 2, on
# attempt 3, fail all 3 (a dead letter), fail with an exit code the podFailurePolicy calls final
# (a dead letter after 1).
RETRY_VARIANTS: tuple[dict[str, Any], ...] = (
    {"fail_attempts": (1,)},
    {"fail_attempts": (1, 2)},
    {"result": "Failed"},
    {"result": "Failed", "exit_code": NOT_RETRYABLE_EXIT_CODE},
)
# Dead letters are kept this long (then the operator deletes them): long enough for the audit to
# see the label, short enough that they do not pile up.
DEAD_LETTER_RETENTION = 60
# RunRequests, all the while (not in rotation): the first batch once the first dead letters are
# there, then one every REQUEST_ROUNDS fault rounds' time; each batch is a backfill of 3 to 6 past
# slots of any ScheduledJob and a replay of the dead letters of one that makes them, each Forbid
# or Allow at random; and, in CANCEL_SHARE of the batches, the deletion of a Forbid request that
# has not finished (a cancellation).
REQUEST_FIRST = 20.0
REQUEST_ROUNDS = 3
BACKFILL_SLOTS = (3, 6)
CANCEL_SHARE = 0.5
# At the quiet end, the requests still running are given this long more to finish.
REQUESTS_SETTLE = 60.0
# At the end, a recorded slot's Job or Run must be released within this many seconds of the
# listing that shows it recorded (an operator and API server still loaded by the faults).
RELEASE_GRACE = 10.0
# step-meddling: for this long, a user meddles with this share of the step Jobs it sees running:
# deletes it in the background, removes its owner reference, or deletes its heartbeat Lease.
MEDDLING_SECONDS = 20.0
MEDDLING_SHARE = 0.5
# lost-deletes: for this long, the leader's Job DELETEs are lost (done, answered 500) or refused.
LOST_DELETES_SECONDS = 20.0
# step-quota: for this long, a ResourceQuota lets no more Jobs be created in the namespace.
QUOTA_SECONDS = 15.0
# restart-all: every replica is killed and restarted this many times, this far apart: a new
# leader with a cold store each time, faster than the steps' heartbeat timeout.
RESTARTS = 3
RESTART_EVERY = 6.0
# kill-leader and pause-leader first wait this long at most for a run to be between attempts.
RUN_WAITS_TIMEOUT = 15.0
# user-deletes: for this long, this share of the new Jobs is deleted the moment it is seen, and
# every failed attempt whose run waits for the next; longer (3 x at most) until one such was.
USER_DELETES_SECONDS = 20.0
USER_DELETES_SHARE = 0.5
# lease-latency: from just before a slot, for three lease durations, every GET and PUT of the
# leader's Lease is held 1.5 x the renew deadline (more than the lease duration too), and every
# third Job create of the leader (not the dry runs) three lease durations: the standbys, whose
# requests are not held, take the Lease over while some of the old leader's creates for that slot
# are on the way, and the fence must refuse those.
LEASE_PATH = rf"^/apis/coordination\.k8s\.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/"
LEASE_DELAY = 1.5 * ELECTION["renew_deadline"]
LEASE_LATENCY_SECONDS = 3 * ELECTION["lease_duration"]
CREATE_DELAY = 3 * ELECTION["lease_duration"]
DELETE_PATH = r"^/apis/batch/v1/namespaces/[^/]+/jobs/"
DELETE_RULES = [
    Rule("DELETE", DELETE_PATH, "lose", every=2, enabled=False),
    Rule("DELETE", DELETE_PATH, "reject", every=2, status=503, enabled=False),
]
LEASE_RULES = [
    *(
        Rule(method, LEASE_PATH, "delay", seconds=LEASE_DELAY, enabled=False)
        for method in ("GET", "PUT")
    ),
    Rule(
        "POST",
        r"^/apis/batch/v1/namespaces/[^/]+/jobs$",
        "delay",
        query=r"^(?!.*dryRun)",
        seconds=CREATE_DELAY,
        every=3,
        enabled=False,
    ),
]


def expected_slots(born: datetime, until: datetime) -> range:
    """The slots s with born < s <= until, in epoch seconds: the multiples of PERIOD."""
    first = (math.floor(born.timestamp()) // PERIOD + 1) * PERIOD
    last = math.floor(until.timestamp()) // PERIOD * PERIOD
    return range(first, last + 1, PERIOD)


@dataclass
class Fault:
    at: float  # seconds since the faults began, when it ended
    kind: str  # one of FAULTS
    applied: bool  # False when there was nobody to apply it to (no leader, no standby)
    what: str
    began: float = 0.0  # epoch seconds
    ended: float = 0.0  # epoch seconds


@dataclass
class Observations:
    jobs: dict[str, Seen] = field(default_factory=dict)  # by uid
    lease: list[tuple[float, str, int]] = field(default_factory=list)  # (time, holder, token)
    faults: list[Fault] = field(default_factory=list)
    restarts: int = 0
    listings: int = 0  # the watcher's listings: the first, then one after each expired watch
    deleting_until: float = 0.0  # user-deletes: new Jobs are deleted until then
    # Set when the auditor sees an attempt fail with attempts left: its run now waits 1 s.
    run_waits: asyncio.Event = field(default_factory=asyncio.Event)
    user_deletes: int = 0  # DELETEs the API server accepted
    user_deletes_held: int = 0  # ... of a Job the slot-record finalizer still held
    user_deletes_waiting: int = 0  # ... of a failed attempt whose run waited for the next
    user_deletes_failed: int = 0
    # Set by each accepted DELETE of a failed attempt whose run waited (read by the fault's thread).
    deleted_waiting: threading.Event = field(default_factory=threading.Event)
    held_creates: dict[str, int] = field(default_factory=dict)  # lease-latency: answers, by code
    gone: set[str] = field(default_factory=set)  # uids of the Jobs seen DELETED
    requests: dict[str, Request] = field(default_factory=dict)  # RunRequests, by uid
    requests_changed: asyncio.Event = field(default_factory=asyncio.Event)  # set on each event
    request_creates_failed: int = 0
    runs: dict[str, RunSeen] = field(default_factory=dict)  # multi-step Runs, by uid
    step_jobs: dict[str, StepSeen] = field(default_factory=dict)  # their step Jobs, by uid
    # Issue 33: every pod's life, by uid; when each Run (by name) let go or was deleted.
    pods: dict[str, PodLife] = field(default_factory=dict)
    pods_broke: float | None = None  # when the pod watch last broke (a relist follows)
    let_go: dict[str, float] = field(default_factory=dict)
    meddling_until: float = 0.0
    meddled: dict[str, int] = field(default_factory=dict)  # step-meddling: by what was done
    meddled_uids: set[str] = field(default_factory=set)

    def requests_pending(self) -> int:
        """The requests neither deleted nor finished."""
        return sum(1 for request in self.requests.values() if request.live)


class JobSightings:
    """Every Job's first sighting and how it ended, listed or watched (a list-then-watch's
    observer): after an API server restart the watch resumes where it was, or lists again if its
    version expired. While the user-deletes fault is on, it is also the user: it deletes a share
    of the Jobs it sees ADDED at once, most of them before their slot is recorded, and every
    attempt it sees fail with attempts left, while its run waits for the next."""

    def __init__(self, api: KubeApi, namespace: str, seen: Observations) -> None:
        self.api, self.namespace, self.seen = api, namespace, seen
        self.deletes: set[asyncio.Task[None]] = set()

    def listed_item(self, obj: dict[str, Any], gone: bool = False) -> None:
        uid = obj["metadata"]["uid"]
        if is_step_job(obj):  # a multi-step run's: audited by hack/chaos_steps.py
            if (step := self.seen.step_jobs.get(uid)) is not None:
                step.observe(obj, gone)
            else:
                self.seen.step_jobs[uid] = step_seen(obj)
            if not gone:
                self.meddle(obj)
            return
        if (known := self.seen.jobs.get(uid)) is not None:
            known.observe(obj, time.time())
        elif entry := first_sighting(obj, time.time()):
            self.seen.jobs[uid] = entry

    def listed(self, version: str) -> None:
        self.seen.listings += 1

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if event_type == "DELETED":
            self.seen.gone.add(uid)
        known = self.seen.jobs.get(uid)
        running = known is not None and known.ended is None
        self.listed_item(obj, gone=event_type == "DELETED")
        waits = running and known is not None and known.retryable  # it has just failed
        if waits:
            self.seen.run_waits.set()
        if time.time() >= self.seen.deleting_until:
            return
        # Every failed attempt seen while the fault is on: runs wait only 1 s, and half of the
        # retry population's attempts are deleted as they appear, so a share would often be none.
        if waits:
            self.user_delete(obj, UserDeleted.WAITING)
        elif event_type == "ADDED" and random.random() < USER_DELETES_SHARE:
            self.user_delete(obj, UserDeleted.RUNNING)

    def meddle(self, obj: dict[str, Any]) -> None:
        """step-meddling: a user does one of three things to a running step Job, once."""
        metadata = obj["metadata"]
        uid = metadata["uid"]
        if time.time() >= self.seen.meddling_until or uid in self.seen.meddled_uids:
            return
        ended = any(
            c.get("status") == "True" and c.get("type") in ("Complete", "Failed")
            for c in (obj.get("status") or {}).get("conditions") or []
        )
        if ended or metadata.get("deletionTimestamp") or random.random() >= MEDDLING_SHARE:
            return
        self.seen.meddled_uids.add(uid)
        template = ((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}
        beats = (template.get("annotations") or {}).get("cronlease.io/heartbeat-lease")
        what = random.choice(("delete-job", "orphan", *(("delete-lease",) * 2 if beats else ())))
        task = asyncio.get_running_loop().create_task(self.meddling(what, metadata))
        self.deletes.add(task)
        task.add_done_callback(self.deletes.discard)

    async def meddling(self, what: str, metadata: dict[str, Any]) -> None:
        name, uid = metadata["name"], metadata["uid"]
        try:
            if what == "delete-job":  # kubectl delete job (background)
                body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
                await self.api.request("DELETE", resource_path(JOBS, self.namespace, name), body)
            elif what == "orphan":  # the README allows keeping a Job by removing its owner
                patch = [{"op": "remove", "path": "/metadata/ownerReferences"}]
                await self.api.request(
                    "PATCH",
                    resource_path(JOBS, self.namespace, name),
                    patch,
                    content_type="application/json-patch+json",
                )
            else:  # its heartbeat Lease, named as the Job (the operator makes it again)
                await asyncio.sleep(1)  # made right after the Job
                await self.api.request("DELETE", resource_path(LEASES, self.namespace, name))
        except Exception:
            what += "-failed"
        self.seen.meddled[what] = self.seen.meddled.get(what, 0) + 1

    def user_delete(self, obj: dict[str, Any], when: UserDeleted) -> None:
        metadata = obj["metadata"]
        task = asyncio.get_running_loop().create_task(
            self.delete(metadata["name"], metadata["uid"], when)
        )
        self.deletes.add(task)
        task.add_done_callback(self.deletes.discard)

    async def delete(self, name: str, uid: str, when: UserDeleted) -> None:
        """What `kubectl delete job NAME` does (background propagation)."""
        path = resource_path(JOBS, self.namespace, name)
        body = {"propagationPolicy": "Background", "preconditions": {"uid": uid}}
        try:
            answer = await self.api.request("DELETE", path, body)
        except Exception:
            self.seen.user_deletes_failed += 1
            return
        self.seen.user_deletes += 1
        if (job := self.seen.jobs.get(uid)) is not None:
            job.user_deleted = when
        if when is UserDeleted.WAITING:
            self.seen.user_deletes_waiting += 1
            self.seen.deleted_waiting.set()
        finalizers = ((answer or {}).get("metadata") or {}).get("finalizers", [])
        if when is UserDeleted.RUNNING and FINALIZER in finalizers:
            self.seen.user_deletes_held += 1

    def failed(self, error: Exception) -> None:
        pass  # the API server is being restarted: the list-then-watch tries again


class RunSightings:
    """Every multi-step Run in the namespace and its latest spec and status."""

    def __init__(self, seen: Observations) -> None:
        self.seen = seen

    def listed_item(self, obj: dict[str, Any], deleted: bool = False) -> None:
        metadata = obj["metadata"]
        run = self.seen.runs.setdefault(metadata["uid"], RunSeen(metadata["uid"], metadata["name"]))
        run.observe(obj, deleted)
        held = SUPERVISION in (metadata.get("finalizers") or [])
        if deleted or (run.phase in STEPS_FINAL and not held):
            self.seen.let_go.setdefault(metadata["name"], time.time())
        obj.setdefault("kind", "Run")  # how a sighting tells a Run's end from a Job's
        if run.sighting is not None:
            run.sighting.observe(obj, time.time())
        elif (entry := first_sighting(obj, time.time())) is not None:
            run.sighting = entry

    def listed(self, version: str) -> None:
        pass

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.listed_item(obj, deleted=event_type == "DELETED")

    def failed(self, error: Exception) -> None:
        pass


class PodSightings:
    """Every pod's life in the namespace (hack/chaos_pods.py audits the step Jobs' pods). A pod
    missing from a relisting ended while the watch was broken: it is taken as ended when the
    watch broke (the audit never blames the operator for the auditor's blind spot)."""

    def __init__(self, seen: Observations) -> None:
        self.seen = seen
        self.listing: set[str] = set()

    def listed_item(self, obj: dict[str, Any]) -> None:
        self.listing.add(obj["metadata"]["uid"])
        self.observe(obj, deleted=False)

    def listed(self, version: str) -> None:
        broke = self.seen.pods_broke or time.time()
        for uid, life in self.seen.pods.items():
            if uid not in self.listing and life.ended is None:
                life.ended = broke
        self.listing = set()
        self.seen.pods_broke = None

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.observe(obj, deleted=event_type == "DELETED")

    def failed(self, error: Exception) -> None:
        self.seen.pods_broke = self.seen.pods_broke or time.time()

    def observe(self, obj: dict[str, Any], deleted: bool) -> None:
        now, uid = time.time(), obj["metadata"]["uid"]
        life = self.seen.pods.get(uid)
        if life is None:
            life = pod_life(obj, now)
            if life is None:
                return
            self.seen.pods[uid] = life
        life.observe(obj, now, deleted)


class RequestSightings:
    """Every RunRequest in the namespace and its latest status (a list-then-watch's observer).
    A request is known from the watch, not from the create's answer: one whose answer was lost
    to an API server restart still has runs to account for."""

    def __init__(self, seen: Observations) -> None:
        self.seen = seen

    def listed_item(self, obj: dict[str, Any]) -> None:
        metadata, spec = obj["metadata"], obj.get("spec") or {}
        request = self.seen.requests.get(metadata["uid"])
        if request is None:
            request = Request(
                uid=metadata["uid"],
                name=metadata["name"],
                scheduledjob=str(spec.get("scheduledJobName", "")),
                action="Backfill" if "backfill" in spec else "Replay",
                policy=str(spec.get("concurrencyPolicy") or "Forbid"),
                created=time.time(),
            )
            self.seen.requests[request.uid] = request
        request.observe(obj)
        self.seen.requests_changed.set()

    def listed(self, version: str) -> None:
        pass

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.listed_item(obj)
        request = self.seen.requests[obj["metadata"]["uid"]]
        if event_type == "DELETED" and request.deleted is None:
            request.deleted = time.time()  # the DELETE's answer was lost: later, so lenient

    def failed(self, error: Exception) -> None:
        pass


async def make_requests(
    api: KubeApi, namespace: str, scheduledjobs: int, every: float, seen: Observations
) -> None:
    """Create RunRequests in batches, and cancel some, until cancelled (see REQUEST_FIRST)."""
    with_dead_letters = [
        i
        for i in range(scheduledjobs)
        if POPULATIONS[i % len(POPULATIONS)] == "retry"
        and "result" in RETRY_VARIANTS[i // len(POPULATIONS) % len(RETRY_VARIANTS)]
    ]
    # Their runs end after one attempt (an exit code called final), and so do their replays.
    at_once = [
        i
        for i in with_dead_letters
        if "exit_code" in RETRY_VARIANTS[i // len(POPULATIONS) % len(RETRY_VARIANTS)]
    ]
    plain = [i for i in range(scheduledjobs) if POPULATIONS[i % len(POPULATIONS)] == "default"]
    await asyncio.sleep(REQUEST_FIRST)
    batch = 0
    while True:
        batch += 1
        last = math.floor(time.time()) // PERIOD * PERIOD - PERIOD  # a past slot
        # The first backfill is of the fewest slots of a ScheduledJob whose runs succeed at once,
        # so that one backfill at least completes even on a slow machine.
        slots = BACKFILL_SLOTS[0] if batch == 1 else random.randint(*BACKFILL_SLOTS)
        backfilled = random.choice(plain if batch == 1 and plain else list(range(scheduledjobs)))
        backfill: dict[str, Any] = {
            "backfill": {
                "from": stamp(last - (slots - 1) * PERIOD),
                "to": stamp(last),
            }
        }
        asked = [(backfilled, f"b{batch}", backfill)]
        if with_dead_letters:
            target = random.choice(at_once if batch == 1 and at_once else with_dead_letters)
            asked.append((target, f"r{batch}", {"replay": {"deadLetters": True}}))
        for index, name, spec in asked:
            # The first batch is Allow: started at once, while the Job controller still keeps up
            # (note 60), it completes even in a short run; a Forbid one may wait for a moment with
            # no active run of its ScheduledJob until the end.
            policy = "Allow" if batch == 1 else random.choice(("Forbid", "Allow"))
            body = {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "RunRequest",
                "metadata": {"name": f"{name}-c{index:04d}"},
                "spec": {"scheduledJobName": f"c{index:04d}", "concurrencyPolicy": policy, **spec},
            }
            try:
                await api.request("POST", resource_path(RUNREQUESTS, namespace), body)
            except Exception:
                seen.request_creates_failed += 1  # an outage: the watch finds it if it was made
        if random.random() < CANCEL_SHARE:
            await cancel_one(api, namespace, seen)
        await asyncio.sleep(every)


async def cancel_one(api: KubeApi, namespace: str, seen: Observations) -> None:
    """Delete a Forbid request that has targets left to start, one midway if there is one."""
    candidates = [
        r
        for r in seen.requests.values()
        if r.live and r.policy == "Forbid" and r.started < (r.total or 1)
    ]
    if not candidates:
        return
    request = max(candidates, key=lambda r: (r.started > 0, random.random()))
    body = {"preconditions": {"uid": request.uid}}
    try:
        await api.request("DELETE", resource_path(RUNREQUESTS, namespace, request.name), body)
    except Exception:
        return  # not accepted, or its answer lost: the watch's DELETED says when, later
    request.deleted = time.time()


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def watch_jobs(api: KubeApi, namespace: str, seen: Observations) -> None:
    await ListWatch(api, resource_path(JOBS, namespace), JobSightings(api, namespace, seen)).run()


async def poll_lease(api: KubeApi, seen: Observations) -> None:
    while True:
        try:
            spec = ((await api.get_lease(OPERATOR_NAMESPACE, LEASE)) or {}).get("spec") or {}
            state = (spec.get("holderIdentity") or "", int(spec.get("leaseTransitions") or 0))
            if not seen.lease or seen.lease[-1][1:] != state:
                seen.lease.append((time.time(), *state))
        except asyncio.CancelledError:
            raise
        except Exception:
            pass
        await asyncio.sleep(0.2)


class Replicas:
    """The operator replicas, and a Deployment's habit of restarting the ones that die."""

    def __init__(
        self, proxies: dict[str, FaultProxy], work: Path, seen: Observations, namespace: str
    ) -> None:
        """One replica for each proxy, named as its key: it reaches the API server through it."""
        self.namespace = namespace
        self.proxies = proxies
        self.all = [
            OperatorProcess(proxy.kubeconfig, work, name) for name, proxy in proxies.items()
        ]
        self.kubeconfig = next(iter(proxies.values())).kubeconfig  # the crash loop's
        self.work, self.seen = work, seen

    def start(self) -> None:
        for replica in self.all:
            replica.start()

    def stop(self) -> None:
        for replica in self.all:
            if replica.process is not None:
                replica.send(signal.SIGCONT)
            replica.stop()

    def leader(self) -> OperatorProcess | None:
        holder = self.seen.lease[-1][1] if self.seen.lease else ""
        return next((r for r in self.all if r.running and r.identity() == holder), None)

    def standby(self) -> OperatorProcess | None:
        leader = self.leader()
        return next((r for r in self.all if r.running and r is not leader), None)

    def kill_and_restart(self, replica: OperatorProcess) -> None:
        replica.stop(signal.SIGKILL)
        time.sleep(2)  # a Deployment's restart is not instant either
        replica.start()
        self.seen.restarts += 1

    def restart_all(self) -> None:
        """Every replica killed and started again, RESTARTS times, RESTART_EVERY apart: each
        time the new leader starts with a cold store, sooner than a heartbeat's timeout."""
        for _ in range(RESTARTS):
            for replica in self.all:
                replica.stop(signal.SIGKILL)
            time.sleep(2)
            for replica in self.all:
                replica.start()
                self.seen.restarts += 1
            time.sleep(RESTART_EVERY)

    def crash_loop(self) -> None:
        """A fourth replica that dies right after starting, three times, with growing backoff."""
        looping = OperatorProcess(self.kubeconfig, self.work, "chaos-crashloop")
        for backoff in (1, 2, 4):
            looping.start()
            self.seen.restarts += 1
            time.sleep(1)
            looping.stop(signal.SIGKILL)
            time.sleep(backoff)


def inject(fault: str, cluster: Cluster, replicas: Replicas) -> tuple[bool, str]:
    """Apply one fault (blocking); return whether it was applied, and what was done."""
    seen = replicas.seen
    if fault == "user-deletes":
        before = seen.user_deletes, seen.user_deletes_held, seen.user_deletes_waiting
        seen.deleted_waiting.clear()
        seen.deleting_until = time.time() + USER_DELETES_SECONDS
        time.sleep(USER_DELETES_SECONDS)
        # Until a failed attempt was deleted while its run waited too, twice as long again at most.
        seen.deleting_until = time.time() + 2 * USER_DELETES_SECONDS
        seen.deleted_waiting.wait(2 * USER_DELETES_SECONDS)
        seen.deleting_until = time.time()
        time.sleep(1)  # a second for the last DELETEs to be answered
        deleted, held, waiting = (
            seen.user_deletes - before[0],
            seen.user_deletes_held - before[1],
            seen.user_deletes_waiting - before[2],
        )
        return True, (
            f"a user deleted {deleted - waiting} new Jobs as they appeared ({held} still held by "
            f"the slot-record finalizer) and {waiting} failed attempts while their runs waited "
            f"for the next, for {USER_DELETES_SECONDS:.0f} s"
        )
    if fault == "step-meddling":
        meddled = dict(seen.meddled)
        seen.meddling_until = time.time() + MEDDLING_SECONDS
        time.sleep(MEDDLING_SECONDS + 2)  # and the Lease deletions' second
        done = {k: v - meddled.get(k, 0) for k, v in seen.meddled.items() if v - meddled.get(k, 0)}
        return True, f"a user meddled with running step Jobs for {MEDDLING_SECONDS:.0f} s: {done}"
    if fault == "lost-deletes":
        leader = replicas.leader()
        if leader is None:
            return False, f"{fault}: no leader right now, skipped"
        proxy = replicas.proxies[leader.name]
        first = len(LEASE_RULES)
        then = proxy.faults()
        for index in range(first, first + len(DELETE_RULES)):
            proxy.switch(index, True)
        time.sleep(LOST_DELETES_SECONDS)
        for index in range(first, first + len(DELETE_RULES)):
            proxy.switch(index, False)
        now = proxy.faults()
        lost, refused = (now[first + i]["fired"] - then[first + i]["fired"] for i in (0, 1))
        return True, (
            f"leader {leader.name}'s Job DELETEs for {LOST_DELETES_SECONDS:.0f} s: every other "
            f"one done but its answer lost ({lost}), or refused 503 ({refused})"
        )
    if fault == "restart-all":
        replicas.restart_all()
        return True, (
            f"every replica SIGKILLed and restarted after 2 s, {RESTARTS} times "
            f"{RESTART_EVERY:.0f} s apart (heartbeat timeout {STEP_HEARTBEAT} s)"
        )
    if fault in ("replay-twice", "delete-run", "step-quota"):
        return asyncio.run(meddle_with_runs(fault, cluster, replicas.namespace, seen))
    if fault == "lease-latency":
        time.sleep((PERIOD - 1 - time.time() % PERIOD) % PERIOD)  # to a second before a slot
        leader = replicas.leader()
        if leader is None:
            return False, f"{fault}: no leader right now, skipped"
        proxy = replicas.proxies[leader.name]
        then = proxy.faults()
        token = seen.lease[-1][2] if seen.lease else -1
        for index in range(len(LEASE_RULES)):
            proxy.switch(index, True)
        time.sleep(LEASE_LATENCY_SECONDS)
        for index in range(len(LEASE_RULES)):
            proxy.switch(index, False)
        time.sleep(max(LEASE_DELAY, CREATE_DELAY) + 1)  # the last held requests arrive
        now = proxy.faults()
        leases = sum(now[i]["fired"] - then[i]["fired"] for i in (0, 1))
        creates = now[2]["fired"] - then[2]["fired"]
        answers = {
            code: count - then[2]["answers"].get(code, 0)
            for code, count in now[2]["answers"].items()
            if count - then[2]["answers"].get(code, 0)
        }
        for code, count in answers.items():
            seen.held_creates[code] = seen.held_creates.get(code, 0) + count
        took_over = [holder for _, holder, t in seen.lease if t > token]
        return True, (
            f"leader {leader.name}'s Lease GET/PUT held {LEASE_DELAY:.1f} s each for "
            f"{LEASE_LATENCY_SECONDS:.0f} s ({leases} held; "
            f"{'taken over by ' + took_over[0] if took_over else 'no takeover'}), every third "
            f"Job create held {CREATE_DELAY:.0f} s ({creates} held; the API server answered "
            f"{answers or 'none'})"
        )
    if fault in ("kill-leader", "pause-leader"):
        leader = replicas.leader()
        if leader is None:
            return False, f"{fault}: no leader right now, skipped"
        if fault == "kill-leader":
            replicas.kill_and_restart(leader)
            return True, f"SIGKILL leader {leader.name}, restarted after 2 s"
        leader.send(signal.SIGSTOP)
        time.sleep(ELECTION["lease_duration"] + 2)
        leader.send(signal.SIGCONT)
        return True, f"SIGSTOP leader {leader.name} for {ELECTION['lease_duration'] + 2:.0f} s"
    if fault == "restart-apiserver":
        cluster.restart("kube-apiserver", down_seconds=2)
        return True, "restarted kube-apiserver (down 2 s, all watches dropped)"
    if fault == "restart-etcd":
        cluster.restart("etcd", down_seconds=2)
        return True, "restarted etcd (down 2 s)"
    if fault == "kill-standby":
        standby = replicas.standby()
        if standby is None:
            return False, "kill-standby: no standby right now, skipped"
        replicas.kill_and_restart(standby)
        return True, f"SIGKILL standby {standby.name}, restarted after 2 s"
    replicas.crash_loop()
    return True, "a replica crash-looped 3 times"


async def quota(api: KubeApi, namespace: str) -> tuple[bool, str]:
    """step-quota: no more Jobs in the namespace for QUOTA_SECONDS (step Jobs among them)."""
    listed = await api.request("GET", resource_path(JOBS, namespace))
    used = len(listed.get("items") or [])
    manifest = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "chaos-no-more-jobs"},
        "spec": {"hard": {"count/jobs.batch": str(used)}},
    }
    await api.request("POST", resource_path(QUOTAS, namespace), manifest)
    await asyncio.sleep(QUOTA_SECONDS)
    await api.request("DELETE", resource_path(QUOTAS, namespace, "chaos-no-more-jobs"))
    return (
        True,
        f"a ResourceQuota let no more Jobs be created for {QUOTA_SECONDS:.0f} s ({used} there)",
    )


async def meddle_with_runs(
    fault: str, cluster: Cluster, namespace: str, seen: Observations
) -> tuple[bool, str]:
    """replay-twice: two replays of one ScheduledJob's dead letters at once (as `kubectl
    cronlease replay --dead-letters`, twice, while the first runs). delete-run: a user deletes
    a multi-step Run that is running. step-quota: see quota()."""
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    api = connect(4)
    try:
        if fault == "step-quota":
            return await quota(api, namespace)
        if fault == "delete-run":
            running = [r for r in seen.runs.values() if not r.deleted and r.phase == "Running"]
            if not running:
                return False, "delete-run: no multi-step Run running right now, skipped"
            run = random.choice(running)
            body = {"preconditions": {"uid": run.uid}}
            await api.request("DELETE", resource_path(RUNS, namespace, run.name), body)
            return True, f"a user deleted Run {run.name} while it ran"
        dead = sorted({job.scheduledjob for job in seen.jobs.values() if job.dead_letter})
        if not dead:
            return False, "replay-twice: no dead letters yet, skipped"
        target = random.choice(dead)
        suffix = uuid.uuid4().hex[:4]
        for twin in ("a", "b"):
            request = {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "RunRequest",
                "metadata": {"name": f"twice-{suffix}{twin}-{target}"},
                "spec": {
                    "scheduledJobName": target,
                    "concurrencyPolicy": "Allow",
                    "replay": {"deadLetters": True},
                },
            }
            await api.request("POST", resource_path(RUNREQUESTS, namespace), request)
        return True, f"two replays of {target}'s dead letters at once"
    except Exception as error:
        return False, f"{fault}: {error}"
    finally:
        await api.close()


def recorded_cursors(scheduledjobs: list[dict[str, Any]]) -> dict[str, float]:
    """Each ScheduledJob's processedUntil as listed: the slots up to it are recorded."""
    cursors: dict[str, float] = {}
    for sj in scheduledjobs:
        until = parse_instant((sj.get("status") or {}).get("processedUntil"))
        if until is not None:
            cursors[sj["metadata"]["name"]] = until.timestamp()
    return cursors


def held_after_recorded(
    cursors: dict[str, float],
    listed_at: float,
    jobs: list[dict[str, Any]],
    seen: Observations,
    step_runs: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The slots recorded by `listed_at` (their ScheduledJob's cursor is past them) whose Job
    or multi-step Run still holds the slot-record finalizer in `jobs` and `step_runs`: their
    release was lost. With retries, a run's attempts are held until it ends, and a dead letter
    until its retention; a request's runs are the request audit's."""
    held: list[dict[str, Any]] = []

    def evidence(kind: str, listed: dict[str, Any], entry: Any, ended: float | None) -> None:
        held.append(
            {
                "kind": kind,
                "name": listed["metadata"]["name"],
                "scheduledjob": entry.scheduledjob,
                "slot": entry.slot,
                "cursor": cursors[entry.scheduledjob],
                "first_seen": round(entry.arrived, 3),
                "run_ended": None if ended is None else round(ended, 3),
                "listed_at": round(listed_at, 3),
            }
        )

    for listed in step_runs:
        run = seen.runs.get(listed["metadata"]["uid"])
        entry = run.sighting if run and run.sighting else first_sighting(listed, time.time())
        if (
            FINALIZER in (listed["metadata"].get("finalizers") or [])
            and entry is not None
            and not entry.from_request
            and entry.slot <= cursors.get(entry.scheduledjob, -math.inf)
        ):
            evidence("Run", listed, entry, None)
    runs = runs_of(seen.jobs.values())
    for listed in jobs:
        metadata = listed["metadata"]
        entry = seen.jobs.get(metadata["uid"])
        if FINALIZER not in (metadata.get("finalizers") or []) or entry is None:
            continue
        if (metadata.get("labels") or {}).get(LABEL_DEAD_LETTER) == "true" or entry.from_request:
            continue
        ended = None
        if entry.max_attempts:
            attempts = runs[entry.scheduledjob, entry.run]
            ended = attempts[-1].ended or attempts[-1].arrived
            if verdict(attempts, listed_at) not in ENDED or ended > listed_at:
                continue
        if entry.slot <= cursors.get(entry.scheduledjob, -math.inf):
            evidence("Job", listed, entry, ended)
    return held


def audit(
    scheduledjobs: list[dict[str, Any]],
    listed_at: float,
    jobs: list[dict[str, Any]],
    seen: Observations,
    step_runs: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """`scheduledjobs` as listed at `listed_at`, after a quiet period; `jobs` and the multi-step
    `step_runs` as listed after them, once their releases settled (`releases_settle`)."""
    by_slot: dict[tuple[str, float], set[str]] = {}
    # A slot's run: its Job, or its Run (a multi-step ScheduledJob's), as first seen.
    firsts = {**seen.jobs, **{uid: r.sighting for uid, r in seen.runs.items() if r.sighting}}
    for uid, job in firsts.items():
        # A slot's Job; its retries carry the same slot, and so do a request's runs, which the
        # request audit accounts for.
        if job.attempt == 1 and not job.from_request:
            by_slot.setdefault((job.scheduledjob, job.slot), set()).add(uid)
    expected = created = missing = behind = 0
    skips: dict[str, int] = {}
    populations: dict[str, dict[str, int]] = {}
    cursors = recorded_cursors(scheduledjobs)
    born_at: dict[str, float] = {}
    for sj in scheduledjobs:
        name = sj["metadata"]["name"]
        born = parse_instant(sj["metadata"]["creationTimestamp"])
        until = parse_instant((sj.get("status") or {}).get("processedUntil"))
        if born is None or until is None:
            continue
        born_at[name] = born.timestamp()
        # Liveness: after the quiet end, every slot more than CURSOR_SLACK old is processed.
        # (Without this, an operator that stopped scheduling would audit clean.)
        behind += len(
            range(
                math.floor(until.timestamp()) // PERIOD * PERIOD + PERIOD,
                math.floor(listed_at - CURSOR_SLACK) + 1,
                PERIOD,
            )
        )
        slots = expected_slots(born, until)
        ran = sum(1 for slot in slots if (name, slot) in by_slot)
        skipped = (sj.get("status") or {}).get("slotsSkipped") or {}
        for reason, count in skipped.items():
            skips[reason] = skips.get(reason, 0) + int(count)
        lost = max(0, len(slots) - ran - sum(int(c) for c in skipped.values()))
        expected += len(slots)
        created += ran
        missing += lost
        kind = (sj["metadata"].get("labels") or {}).get(POPULATION_LABEL, "default")
        row = populations.setdefault(
            kind, {"scheduledjobs": 0, "expected": 0, "created": 0, "missing": 0, "gone": 0}
        )
        row["scheduledjobs"] += 1
        row["expected"] += len(slots)
        row["created"] += ran
        row["missing"] += lost
        # The Jobs gone before the end (TTL, history cleanup, a user): the paths under test ran.
        row["gone"] += sum(
            1 for uid, job in seen.jobs.items() if job.scheduledjob == name and uid in seen.gone
        )
    # Any slot, recorded yet or not, with two Jobs ever created is a duplicate.
    duplicated = sum(len(uids) - 1 for uids in by_slot.values())
    # A Job for no slot the oracle names: off the 10 s grid, or not after its ScheduledJob's
    # creation (a Job the auditor could not attribute counts here too).
    off_schedule = sum(
        1
        for job in firsts.values()
        if not job.from_request
        and (
            job.slot % PERIOD != 0
            or job.scheduledjob not in born_at
            or job.slot <= born_at[job.scheduledjob]
        )
    )
    held = held_after_recorded(cursors, listed_at, jobs, seen, step_runs)
    # A request's runs, its Jobs and its multi-step Runs, are the request audit's.
    held_by_requests = [
        entry
        for listed in [*jobs, *step_runs]
        if FINALIZER in (listed["metadata"].get("finalizers") or [])
        and (entry := firsts.get(listed["metadata"]["uid"])) is not None
        and entry.from_request
        and (listed["metadata"].get("labels") or {}).get(LABEL_DEAD_LETTER) != "true"
    ]
    # A Job is from a stale leader if a newer token had been seen more than a second before the
    # API server admitted it. Its creationTimestamp is stamped just before validating admission
    # (the fence) and is cut to the second, so created > seen + 1 s means admitted more than 1 s
    # after the newer token. Its first sighting is no measure: a create admitted while its token
    # was current can be stored seconds later (etcd restarting) and reach the watch after a
    # takeover; those are reported apart (the fence checked them in time).
    stale: list[dict[str, Any]] = []
    late: list[dict[str, Any]] = []
    for job in seen.jobs.values():
        newer = [(at, token) for at, _, token in seen.lease if token > job.token]
        if not newer:
            continue
        first = min(newer)
        evidence = {
            "job": job.name,
            "leader": job.leader,
            "token": job.token,
            "created": job.created,
            "first_seen": round(job.arrived, 3),
            "newer_token": first[1],
            "newer_token_seen": round(first[0], 3),
        }
        if job.created is not None and job.created > first[0] + 1.0:
            stale.append(evidence)
        elif first[0] < job.arrived - 1.0:
            late.append(evidence)
    lags = [
        job.arrived - job.slot
        for job in seen.jobs.values()
        if job.attempt == 1 and not job.from_request
    ]
    leader_faults = [
        fault.began
        for fault in seen.faults
        if fault.applied and fault.kind in ("kill-leader", "pause-leader", "lease-latency")
    ]
    attempts = audit_runs(seen.jobs.values(), time.time(), leader_faults)
    by_request = audit_requests(
        list(seen.requests.values()), firsts.values(), held_by_requests, time.time()
    )
    return {
        "slots_expected": expected,
        "slots_created": created,
        "allowed_skips": sum(v for k, v in skips.items() if k in ALLOWED_SKIPS),
        "disallowed_skips": sum(v for k, v in skips.items() if k not in ALLOWED_SKIPS),
        "duplicates": duplicated,
        "silent_losses": missing,
        "slots_not_processed": behind,
        "off_schedule_jobs": off_schedule,
        "stale_leader_writes": len(stale),
        "seen_late_after_takeover": len(late),
        "held_after_recorded": len(held),
        "held_after_recorded_jobs": held,
        "jobs_seen": len(seen.jobs),
        "jobs_left_at_end": len(jobs),
        "user_deletes": seen.user_deletes,
        "user_deletes_held": seen.user_deletes_held,
        "user_deletes_failed": seen.user_deletes_failed,
        "user_deletes_waiting": seen.user_deletes_waiting,
        "watch_relistings": max(0, seen.listings - 1),
        "held_creates": sum(seen.held_creates.values()),
        "held_creates_refused": seen.held_creates.get("403", 0),
        "operator_restarts": seen.restarts,
        "leader_changes": max(0, len({token for _, _, token in seen.lease}) - 1),
        "max_lag_s": round(max(lags, default=0.0), 2),
        "stale_leader_jobs": stale,
        "seen_late_after_takeover_jobs": late,
        "skips_by_reason": skips,
        "by_population": populations,
        "request_creates_failed": seen.request_creates_failed,
        **attempts,
        **by_request,
        **audit_steps(
            seen.runs.values(),
            seen.step_jobs.values(),
            time.time(),
            takeovers=[at for at, holder, _ in seen.lease[1:] if holder],
            outages=[
                (fault.began, fault.ended)
                for fault in seen.faults
                if fault.applied and fault.kind in ("restart-apiserver", "restart-etcd")
            ],
        ),
        **audit_pods(seen.pods.values(), step_attempts(seen), seen.let_go),
        "step_meddling": dict(sorted(seen.meddled.items())),
    }


def step_attempts(seen: Observations) -> dict[str, Attempt]:
    return {
        uid: Attempt(job.run, job.step, job.action, job.attempt)
        for uid, job in seen.step_jobs.items()
    }


# The audit's figures, in the report's order, with the words the report uses for them.
LABELS = {
    "slots_expected": "slots expected",
    "slots_created": "slots created",
    "allowed_skips": "slots skipped (allowed reasons)",
    "disallowed_skips": "skipped for reasons not allowed",
    "duplicates": "duplicated",
    "silent_losses": "missing without a reason",
    "slots_not_processed": f"slots older than {CURSOR_SLACK:.0f} s not yet processed at the end",
    "off_schedule_jobs": "Jobs for no expected slot",
    "stale_leader_writes": "stale-leader writes admitted",
    "seen_late_after_takeover": "... Jobs admitted under the old token but first seen more than "
    "1 s after the new one (stored late)",
    "held_after_recorded": "recorded slots whose Job or Run still holds the finalizer at the end",
    "released_late": "... released only after the audit's first listing, within the grace",
    "jobs_seen": "Jobs seen by the auditor",
    "jobs_left_at_end": "Jobs left at the end",
    "user_deletes": "Jobs deleted by the user-deletes fault",
    "user_deletes_held": "... of them while the finalizer held them (slot not yet recorded)",
    "user_deletes_waiting": "... of them failed attempts whose run waited for its next attempt",
    "watch_relistings": "auditor's watch relistings (expired watches)",
    "held_creates": "Job creates held by lease-latency",
    "held_creates_refused": "... refused by the fence when they arrived (403)",
    "operator_restarts": "operator restarts",
    "leader_changes": "leader changes",
    "max_lag_s": "maximum lag s",
    "runs": "runs (a slot's Job and its retries)",
    "retry_runs": "... of them with spec.retry",
    "retries_created": "retries created (attempt 2 or later)",
    "duplicated_attempts": "attempts created twice (one run, one number)",
    "attempt_gaps": "attempt numbers missing below a run's latest",
    "attempts_over_max": "attempts beyond the run's maxAttempts",
    "attempts_after_final": "attempts after a success or a final failure",
    "lost_attempts": "runs that failed with attempts left and got no next attempt (lost)",
    "exhausted_not_dead_lettered": "runs out of attempts not labelled a dead letter",
    "next_attempt_by_new_leader": "next attempts made under another fencing token than the one "
    "before",
    "runs_waiting_at_leader_fault": "runs waiting for their next attempt when a leader kill, "
    "pause or Lease delay began",
    "continued_after_user_delete": "next attempts created after the user's deletion of the "
    "failed one was accepted (a decision already in flight)",
    "attempt_seconds_median": "an attempt's time from creation to its end, median s (pods run 1 s)",
    "attempt_seconds_max": "... longest s",
    "requests": "RunRequests created",
    "requests_backfill": "... backfills (3 to 6 past slots)",
    "requests_replay": "... replays of dead letters",
    "requests_cancelled": "... deleted before they finished (cancelled)",
    "request_creates_failed": "RunRequest creates that failed (an outage)",
    "backfills_complete": "backfills Complete (with at least one target)",
    "replays_complete": "replays Complete (with at least one target)",
    "request_targets_complete": "targets of the Complete requests",
    "request_runs": "runs of requests",
    "request_retries": "... retries among them (attempt 2 or later)",
    "duplicated_targets": "targets of a request with two runs",
    "off_target_runs": "request runs for no target of a request (unknown uid, index out of range)",
    "complete_targets_without_run": "targets of Complete requests without a run",
    "complete_counts_wrong": "Complete requests whose succeeded + failed is not their total",
    "started_after_cancel": "targets started more than 2 s after their request's deletion",
    "started_in_flight_at_cancel": "... within 2 s (a decision already in flight)",
    "request_runs_held_at_end": "request runs ended but still holding the finalizer at the end",
    "step_runs": "multi-step Runs",
    "step_jobs": "... their step Jobs (attempts and compensations)",
    "step_attempts_twice": "step attempts with two Jobs (an attempt run twice)",
    "step_attempt_gaps": "step attempt numbers missing below a step's latest",
    "step_attempts_over_max": "step attempts beyond the step's maxAttempts",
    "finished_steps_redone": "attempts of a step after the one its Run recorded as succeeded",
    "compensated_unfinished_steps": "compensations of steps that never succeeded",
    "heartbeat_restarts": "steps restarted because no heartbeat came",
    "step_runs_unfinished": "multi-step Runs still running at the end (the Job controller's lag)",
    "heartbeats_noticed_late": "heartbeats lost noticed more than 12 s after their deadline, or "
    "after a takeover past it, API server and etcd restarts not counted (a restart extended it)",
    "heartbeat_noticed_latest_s": "... the latest, s after the deadline or that takeover",
    "step_runs_stuck": "multi-step Runs neither final nor escalated 5 minutes after their last "
    "progress, their step Jobs all ended",
    "step_pods": "step Jobs' pods seen",
    "step_pods_of_two_attempts_at_once": "pods of two attempts of one step alive at once",
    "compensation_beside_a_step_pod": "compensation pods alive beside a pod of a step",
    "step_pods_outliving_their_run": "step pods alive after their Run let go or was deleted",
    "step_meddling": "step-meddling: what the user did to running step Jobs",
    "runs_replayed": "dead letters replayed",
    "runs_replayed_twice": "dead letters replayed twice (across requests)",
}
MUST_BE_ZERO = (
    "duplicates",
    "silent_losses",
    "slots_not_processed",
    "off_schedule_jobs",
    "stale_leader_writes",
    "disallowed_skips",
    "held_after_recorded",
    "duplicated_attempts",
    "attempt_gaps",
    "attempts_over_max",
    "attempts_after_final",
    "lost_attempts",
    "exhausted_not_dead_lettered",
    *REQUESTS_MUST_BE_ZERO,
    *STEPS_MUST_BE_ZERO,
    *PODS_MUST_BE_ZERO,
)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "duration_s": args.duration,
        "fault_every_s": args.fault_every,
        "scheduledjobs": args.scheduledjobs,
        "replicas": args.replicas,
        "schedule": SCHEDULE,
        "starting_deadline_s": DEADLINE,
        "populations": list(POPULATIONS),
        "retry": RETRY,
        "retry_variants": [
            {key: list(v) if isinstance(v, tuple) else v for key, v in variant.items()}
            for variant in RETRY_VARIANTS
        ],
        "dead_letter_retention_s": DEAD_LETTER_RETENTION,
        "user_deletes_s": USER_DELETES_SECONDS,
        "user_deletes_share": USER_DELETES_SHARE,
        "lease_delay_s": LEASE_DELAY,
        "create_delay_s": CREATE_DELAY,
        "lease_latency_s": LEASE_LATENCY_SECONDS,
        "election": ELECTION,
        "request_first_s": REQUEST_FIRST,
        "request_every_s": REQUEST_ROUNDS * args.fault_every,
        "backfill_slots": list(BACKFILL_SLOTS),
        "cancel_share": CANCEL_SHARE,
    }


def report(
    result: dict[str, Any], args: argparse.Namespace, faults: list[Fault], elapsed: float
) -> str:
    lines = [
        f"# Chaos run: {args.duration:.0f} s of faults, {args.scheduledjobs} ScheduledJobs "
        f"({SCHEDULE}, startingDeadlineSeconds {DEADLINE}), {args.replicas} replicas",
        "",
        f"`python bench/chaos.py --duration {args.duration:.0f} --fault-every "
        f"{args.fault_every:.0f}` ({elapsed / 60:.0f} minutes in all). Populations: a fifth of "
        "the ScheduledJobs with `ttlSecondsAfterFinished: 0`, a fifth with both history limits "
        "0, a fifth keeping 2 successful and 1 failed, a fifth multi-step (three steps, the "
        f"middle one with a {STEP_HEARTBEAT} s heartbeat nobody renews and failing chosen "
        "attempts: none, the first, or both, when the run compensates its first step), and a "
        "fifth with "
        f"`retry: {json.dumps(RETRY)}` (dead letters kept {DEAD_LETTER_RETENTION} s) whose "
        "pods fail chosen attempts, in turn: attempt 1 (success on 2), attempts 1 and 2 "
        "(success on 3), every attempt (a dead letter after 3), and exit code "
        f"{NOT_RETRYABLE_EXIT_CODE}, which their podFailurePolicy calls final (a dead letter "
        "after 1). The user-deletes fault also deletes failed attempts while their runs wait "
        "for the next (which ends the run). The slots expected are the auditor's own "
        "arithmetic (multiples of 10 s since the epoch in (creation, processedUntil]), not the "
        "operator's `Schedule`. Each replica reaches the API server through its own fault "
        f"proxy (during lease-latency, the leader's Lease GET/PUT held {LEASE_DELAY:.1f} s "
        f"and every third Job create of its {CREATE_DELAY:.0f} s; election "
        f"{ELECTION['lease_duration']:.0f} s lease, "
        f"{ELECTION['renew_deadline']:.0f} s renew deadline); the auditor and the "
        "user-deletes fault talk to the API server directly.",
        "",
        "| figure | value | must be |",
        "|---|---|---|",
    ]
    for key, label in LABELS.items():
        lines.append(f"| {label} | {result[key]} | {'0' if key in MUST_BE_ZERO else ''} |")
    lines += [
        "",
        "| population | ScheduledJobs | slots expected | slots created | missing "
        "| Jobs deleted during the run |",
        "|---|---|---|---|---|---|",
    ]
    for kind, row in sorted(result["by_population"].items()):
        lines.append(
            f"| {kind} | {row['scheduledjobs']} | {row['expected']} | {row['created']} "
            f"| {row['missing']} | {row['gone']} |"
        )
    lines += [
        "",
        "| runs with spec.retry, by what they came to | runs |",
        "|---|---|",
    ]
    lines += [f"| {kind} | {count} |" for kind, count in result["runs_by_verdict"].items()]
    lines += [
        "",
        "Runs that succeeded, by attempt: "
        + (", ".join(f"{n}: {c}" for n, c in result["succeeded_on_attempt"].items()) or "none"),
        "",
        f"Skips by reason: {result['skips_by_reason'] or 'none'}",
        "",
        f"RunRequests by phase at the end: {result['requests_by_phase'] or 'none'}",
        "",
        "Faults injected:",
        "",
    ]
    lines += [f"- t+{fault.at:.0f} s: {fault.what}" for fault in faults]
    for key, title in (
        ("held_after_recorded_jobs", f"Still held {RELEASE_GRACE:.0f} s after the listing"),
        ("released_late_jobs", "Released late"),
    ):
        if result.get(key):
            lines += ["", f"{title}:", ""]
            lines += [f"- {json.dumps(item, sort_keys=True)}" for item in result[key]]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        loaded = Cluster.load(cluster_dir())
        if loaded is None or loaded.kubeconfig != Path(args.kubeconfig):
            sys.exit("chaos restarts control-plane components: it needs the local devcluster")
        cluster = loaded
    else:
        cluster = ensure_cluster()
    began = time.time()
    install_chart(cluster.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="cronlease-chaos-"))
    operator_config = service_account_kubeconfig(cluster.kubeconfig, work / "kubeconfig")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    api = connect(32)
    seen = Observations()
    namespace = f"chaos-{uuid.uuid4().hex[:6]}"
    await api.request("POST", resource_path(NAMESPACES), {"metadata": {"name": namespace}})
    print(f"work dir (operator and proxy logs): {work}", flush=True)
    try:
        with contextlib.ExitStack() as stack:
            proxies = {}
            for i in range(args.replicas):
                name = f"chaos-{i}"
                (work / name).mkdir()
                proxies[name] = stack.enter_context(
                    faultproxy.running(
                        cluster.kubeconfig, operator_config, [*LEASE_RULES, *DELETE_RULES],
                        work / name,
                    )
                )  # fmt: skip
            replicas = Replicas(proxies, work, seen, namespace)
            stack.callback(replicas.stop)  # before the proxies go
            result = await chaos(args, api, namespace, cluster, replicas, seen)
    finally:
        with contextlib.suppress(Exception):  # never hide the error that got us here
            await release_leftovers(api, namespace)
            await api.request("DELETE", resource_path(NAMESPACES, name=namespace))
        await api.close()
    elapsed = time.time() - began
    text = report(result, args, seen.faults, elapsed)
    print(text)
    failed = [key for key in MUST_BE_ZERO if result[key]]
    record = {
        "settings": settings(args),
        "audit": result,
        "must_be_zero": list(MUST_BE_ZERO),
        "failed": failed,
        "faults": [asdict(fault) for fault in seen.faults],
    }
    save(text, record, Path(args.out))
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


async def chaos(
    args: argparse.Namespace,
    api: KubeApi,
    namespace: str,
    cluster: Cluster,
    replicas: Replicas,
    seen: Observations,
) -> dict[str, Any]:
    """Start the replicas and the ScheduledJobs, inject the faults, settle, and audit."""
    await asyncio.to_thread(replicas.start)
    tasks = [
        asyncio.create_task(watch_jobs(api, namespace, seen)),
        asyncio.create_task(poll_lease(api, seen)),
        asyncio.create_task(
            ListWatch(api, resource_path(RUNREQUESTS, namespace), RequestSightings(seen)).run()
        ),
        asyncio.create_task(
            ListWatch(api, resource_path(RUNS, namespace), RunSightings(seen)).run()
        ),
        asyncio.create_task(
            ListWatch(api, resource_path(PODS, namespace), PodSightings(seen)).run()
        ),
    ]
    try:
        for i in range(args.scheduledjobs):
            await api.request(
                "POST", resource_path(SCHEDULEDJOBS, namespace), scheduledjob(i, namespace)
            )
        start = time.time()
        every = REQUEST_ROUNDS * args.fault_every
        requests = asyncio.create_task(
            make_requests(api, namespace, args.scheduledjobs, every, seen)
        )
        tasks.append(requests)
        print(
            f"{args.scheduledjobs} ScheduledJobs in {namespace}; "
            f"faults every {args.fault_every:.0f} s",
            flush=True,
        )
        index = 0
        # Every kind of fault at least once, however short the run.
        while time.time() - start < args.duration or index < len(FAULTS):
            await asyncio.sleep(args.fault_every)
            fault = FAULTS[index % len(FAULTS)]
            waiting = fault in ("kill-leader", "pause-leader") and await a_run_waits(seen)
            index += 1
            began = time.time()
            applied, what = await asyncio.to_thread(inject, fault, cluster, replicas)
            if applied and waiting:
                what += ", as a run waited for its next attempt"
            ended = time.time()
            seen.faults.append(Fault(ended - start, fault, applied, what, began, ended))
            print(f"  t+{time.time() - start:.0f} s: {what}", flush=True)
        requests.cancel()  # no more requests either: the quiet end is for them to finish too
        # A quiet end: catch-ups within the deadline, then a clean status everywhere; and the
        # requests' last runs, which a slow Job controller may keep waiting (REQUESTS_SETTLE).
        await asyncio.sleep(DEADLINE / 2)
        await requests_finish(seen)
        listed_at = time.time()
        listed = await api.request("GET", resource_path(SCHEDULEDJOBS, namespace))
        jobs, step_runs, released = await releases_settle(
            api, namespace, recorded_cursors(listed["items"]), listed_at, seen
        )
        record = audit(listed["items"], listed_at, jobs, seen, step_runs)
        return {**record, "released_late": len(released), "released_late_jobs": released}
    finally:
        for task in tasks:
            task.cancel()


async def releases_settle(
    api: KubeApi, namespace: str, cursors: dict[str, float], listed_at: float, seen: Observations
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """List the Jobs and multi-step Runs until every slot recorded in `cursors` has had its
    finalizer released, for at most RELEASE_GRACE. A slot is released right after the status
    write that records it, but that write's own Job, or a retry's run that ended just before
    `listed_at`, may still be on its way through a loaded operator and API server. Returns the
    last listings and the ones released during the grace, with how long after `listed_at`."""
    released: dict[str, dict[str, Any]] = {}
    deadline = time.time() + RELEASE_GRACE
    while True:
        jobs = (await api.request("GET", resource_path(JOBS, namespace)))["items"]
        step_runs = (await api.request("GET", resource_path(RUNS, namespace)))["items"]
        held = held_after_recorded(cursors, listed_at, jobs, seen, step_runs)
        names = {item["name"] for item in held}
        for item in held:
            released.setdefault(item["name"], item)
        for name in set(released) - names:
            released[name].setdefault("released_after_s", round(time.time() - listed_at, 1))
        if not held or time.time() > deadline:
            break
        await asyncio.sleep(1.0)  # polling a condition, with a deadline
    late = [item for item in released.values() if "released_after_s" in item]
    return jobs, step_runs, late


async def requests_finish(seen: Observations) -> None:
    """Wait until every request is finished or deleted, or REQUESTS_SETTLE has passed."""
    try:
        async with asyncio.timeout(REQUESTS_SETTLE):
            while seen.requests_pending():
                seen.requests_changed.clear()
                await seen.requests_changed.wait()
    except TimeoutError:
        pass  # the audit reports them by phase


async def release_leftovers(api: KubeApi, namespace: str) -> None:
    """Remove the slot-record finalizer from the Jobs left holding it once the replicas are gone
    (dead letters within their retention, a run cut short), as the README tells an admin to:
    otherwise the namespace would never finish terminating."""
    listed = await api.request("GET", resource_path(JOBS, namespace))
    for job in listed["items"]:
        metadata = job["metadata"]
        if FINALIZER in (metadata.get("finalizers") or []):
            await api.release_job(namespace, metadata["name"], metadata["uid"], FINALIZER)
    listed = await api.request("GET", resource_path(RUNS, namespace))
    for run in listed["items"]:
        metadata = run["metadata"]
        if FINALIZER in (metadata.get("finalizers") or []):
            await api.release_run(namespace, metadata["name"], metadata["uid"], FINALIZER)


async def a_run_waits(seen: Observations) -> bool:
    """Wait until an attempt has just failed with attempts left, so that a fault on the leader
    hits its run between two attempts (the next is due 1 s later); False if none did in time."""
    seen.run_waits.clear()
    try:
        async with asyncio.timeout(RUN_WAITS_TIMEOUT):
            await seen.run_waits.wait()
    except TimeoutError:
        return False
    return True


def scheduledjob(index: int, namespace: str) -> dict[str, Any]:
    population = POPULATIONS[index % len(POPULATIONS)]
    job_spec: dict[str, Any] = {"backoffLimit": 0, "template": kwok_pod_template("1s")}
    history: dict[str, Any] = {"successfulJobsHistoryLimit": 2, "failedJobsHistoryLimit": 1}
    if population == "ttl-zero":
        job_spec["ttlSecondsAfterFinished"] = 0
    elif population == "history-zero":
        history = {"successfulJobsHistoryLimit": 0, "failedJobsHistoryLimit": 0}
    elif population == "steps":
        return stepped(index, namespace)
    elif population == "retry":
        variant = RETRY_VARIANTS[index // len(POPULATIONS) % len(RETRY_VARIANTS)]
        job_spec["template"] = kwok_pod_template("1s", **variant)
        if "exit_code" in variant:
            job_spec["podFailurePolicy"] = {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {"operator": "In", "values": [variant["exit_code"]]},
                    }
                ]
            }
        history |= {"retry": RETRY, "deadLetter": {"retentionSeconds": DEAD_LETTER_RETENTION}}
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": f"c{index:04d}",
            "labels": {RUN_LABEL: namespace, POPULATION_LABEL: population},
        },
        "spec": {
            "schedule": SCHEDULE,
            "startingDeadlineSeconds": DEADLINE,
            **history,
            "jobTemplate": {"spec": job_spec},
        },
    }


def stepped(index: int, namespace: str) -> dict[str, Any]:
    """A multi-step ScheduledJob: snapshot (compensated if the run fails), interest (heartbeat,
    failing chosen attempts), publish."""
    fail = STEP_VARIANTS[index // len(POPULATIONS) % len(STEP_VARIANTS)]

    def template(**kwargs: Any) -> dict[str, Any]:
        return {"spec": {"backoffLimit": 0, "template": kwok_pod_template("1s", **kwargs)}}

    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": f"c{index:04d}",
            "labels": {RUN_LABEL: namespace, POPULATION_LABEL: "steps"},
        },
        "spec": {
            "schedule": SCHEDULE,
            "startingDeadlineSeconds": DEADLINE,
            "successfulJobsHistoryLimit": 2,
            "failedJobsHistoryLimit": 1,
            "retry": {"maxAttempts": 2, "backoff": {"initialSeconds": 1}},
            "steps": [
                {
                    "name": "snapshot",
                    "jobTemplate": template(),
                    "compensate": {"jobTemplate": template()},
                },
                {
                    "name": "interest",
                    "dependsOn": ["snapshot"],
                    "heartbeat": {"timeoutSeconds": STEP_HEARTBEAT},
                    "jobTemplate": template(fail_attempts=fail),
                },
                {"name": "publish", "dependsOn": ["interest"], "jobTemplate": template()},
            ],
        },
    }


def save(text: str, record: dict[str, Any], out: Path) -> None:
    save_results(out, "chaos-latest", text, record)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=180, help="seconds of fault injection")
    parser.add_argument("--fault-every", type=float, default=20, help="seconds between faults")
    parser.add_argument(
        "--scheduledjobs",
        type=int,
        default=40,
        help="ScheduledJobs (each one Job every 10 s); more than the job controller finishes "
        "at its default 20 requests/s leave Jobs unfinished, so TTL and history never act",
    )
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument(
        "--kubeconfig", help="the running devcluster's kubeconfig (default: start one)"
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
