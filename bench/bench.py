"""cronlease against the built-in CronJob controller, in one control plane, in one run.

For each N: N ScheduledJobs, then N equivalent CronJobs (kube-controller-manager's controller at
its defaults), each set alone in a fresh namespace so the two never compete for the machine in
the same burst, all due at the same measured minutes and at no others. One watcher outside both
controllers stamps the ADDED event of every Job; lag = arrival - slot, the slot read from the
Job's cronlease.io/scheduled-at or batch.kubernetes.io/cronjob-scheduled-timestamp annotation.
A plain client creating the same N Jobs at once gives the physical limit (suspended ones, with no
pods to follow, the API server's alone). Our phases end by suspending the ScheduledJobs and
measuring the operator's RSS once it is at rest; each phase ends by deleting what it made and
giving the namespace up to three minutes to go before the next begins. RSS and CPU come from
/proc.

    make bench                      # N = 100, 1000, 5000
    python bench/bench.py --n 100 --slots 1
    python bench/bench.py --n 100 1000 --pin --out bench/results/pinned

With --pin, the control plane keeps to the first core and the bench (its raw client and its
watcher) and the operator to the second, as separate nodes would keep them in a real cluster:
the operator's CPU then no longer comes out of the API server's. kube-controller-manager, and
so CronJob's controller, is the control plane's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cpu_pinning
from burst_profiles import DEFAULT_SECONDS, Profiler
from cronlease.core.names.naming import ANNOTATION_SCHEDULED_AT, parse_time
from cronlease.shell.kube import (
    JOBS,
    NAMESPACES,
    SCHEDULEDJOBS,
    ApiError,
    KubeApi,
    TransportError,
    connect,
    resource_path,
)
from cronlease.shell.listwatch import ListWatch
from devcluster import ensure_cluster
from devcluster.cluster import kwok_pod_template
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.replica import PRODUCTION_ELECTION, REPO, OperatorProcess
from operator_jobs import operator_jobs
from percentiles import nearest_rank

CRONJOB_SLOT = "batch.kubernetes.io/cronjob-scheduled-timestamp"
RUN_LABEL = "bench.cronlease.io/run"
CREATE_CONCURRENCY = 64  # the operator's own pool size, for the raw-create baseline too
TICK = 1.0 / 100  # /proc/<pid>/stat counts CPU time in clock ticks of 10 ms on Linux
SAMPLE_PERIOD = 0.25
NAMESPACE_GRACE = 180.0
COLLECTION_DELETE_ATTEMPTS = 5
# What creates Jobs, then the Jobs, deleted first at a phase's end (see delete_namespaces).
CRONJOBS = ("batch/v1", "cronjobs")
FIRING = (SCHEDULEDJOBS, CRONJOBS, JOBS)
REST_WINDOW = 8.0  # seconds of quiet measured just before each first slot
QUIET_CPU = 0.05  # of a core: the operator at rest after the bursts (rest_after_bursts)
QUIET_LIMIT = 300.0  # seconds to wait for that rest
# Seconds from that reading to the settled one: within seconds of quiet the operator closes its
# idle connections and trims its heap (cronlease.shell.kube.IDLE_CONNECTION, heaptrim.TRIM_EVERY).
SETTLE = 30.0
# How long before each later slot the bench reads which ScheduledJobs have not yet recorded the
# slot before it (unrecorded_before): ahead of the burst, so the list is not in its way.
BEHIND_LEAD = 2.0
# The schedule the objects are created with: none of its instants comes within the phase (the
# next is 29 February 2028 at midnight). See arm().
DORMANT = "0 0 29 2 *"
ARM_LEAD = 10.0  # seconds from the objects settling to the first measured slot, at least
# The rewrite of every schedule (arm) may take longer than the creation took to be acknowledged:
# at N=5000 on 2026-12-07, 202 s against 74. An arm that settles too late has already let the
# settled objects fire its first slot, and that unmeasured burst ran into the measured ones
# (4,610 Jobs; bursts of 24 and 51 s against 12): so the first arm aims this many setups out.
ARM_SETUPS = 3.0
ARM_ATTEMPTS = 3
MAX_SLOTS = 15  # see firing_only_at
LOG_TIME = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")  # in the operator's log lines
SLOT_PERIOD = 60.0  # the measured slots are consecutive minutes
# At N <= SMALL_N a burst and a raw create each take a few tenths of a second, and consecutive
# raw creates of the same 100 Jobs varied from 0.19 to 0.43 s (design note 122): one sample a
# side is noise as large as the 10% the target allows. There, the controllers are measured over
# --small-slots slots and the raw creates are made RAW_ROUNDS_SMALL times before and after.
SMALL_N = 100
RAW_ROUNDS_SMALL = 3


@dataclass
class Phase:
    controller: str
    n: int
    slots: list[str] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)
    expected: int = 0
    missing: int = 0
    # Each measured slot's burst, from the slot to its last Job; None if some never came.
    bursts: list[float | None] = field(default_factory=list)
    burst_seconds: float | None = None  # their mean, as the raw create's two runs: None if one is
    rest_rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    after_rss_mb: float = float("nan")  # at rest after the bursts (rest_after_bursts)
    after_quiet_s: float = float("nan")  # from suspending to quiet
    settled_rss_mb: float = float("nan")  # the same, SETTLE seconds later
    after_jobs: int = 0  # the namespace's Jobs at rest after the bursts...
    after_unfinished: int = 0  # ...of which the job controller had not finished these
    # Exactly once over the measured slots, at rest: each slot has its Job (whenever it came) or
    # is counted in its ScheduledJob's status.slotsSkipped; `unaccounted` is neither (must be 0).
    after_created: int = 0
    after_skipped: dict[str, int] = field(default_factory=dict)  # by reason
    unaccounted: int = 0
    rest_cpu_s_per_min: float = 0.0
    burst_cpu_s_per_min: float = 0.0
    burst_cpu_ms_per_job: float = float("nan")  # the operator's, from the slot to its last Job
    # Each measured slot after the first: its Jobs split by whether their ScheduledJob had
    # recorded the slot before in its status BEHIND_LEAD seconds before this one (behind_split).
    behind: list[dict[str, Any]] = field(default_factory=list)

    def percentile(self, q: float) -> float | None:
        """Over every Job due, a missing one counting as infinitely late: None when the
        percentile falls among those. Over the arrivals alone, a controller that creates
        half its Jobs within the window would look as good as one that creates them all."""
        due = self.lags + [math.inf] * self.missing
        value = nearest_rank(due, q) if due else math.inf
        return None if math.isinf(value) else value

    def summary(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "n": self.n,
            "jobs": len(self.lags),
            "missing": self.missing,
            "p50": self.percentile(0.50),
            "p90": self.percentile(0.90),
            "p99": self.percentile(0.99),
            "max": self.percentile(1.0),
            "bursts": self.bursts,
            "burst_seconds": self.burst_seconds,
            "rest_rss_mb": self.rest_rss_mb,
            "peak_rss_mb": self.peak_rss_mb,
            "after_rss_mb": self.after_rss_mb,
            "after_quiet_s": self.after_quiet_s,
            "settled_rss_mb": self.settled_rss_mb,
            "after_jobs": self.after_jobs,
            "after_unfinished": self.after_unfinished,
            "after_created": self.after_created,
            "after_skipped": self.after_skipped,
            "unaccounted": self.unaccounted,
            "rest_cpu_s_per_min": self.rest_cpu_s_per_min,
            "burst_cpu_s_per_min": self.burst_cpu_s_per_min,
            "burst_cpu_ms_per_job": self.burst_cpu_ms_per_job,
        }


# Process cost, read from /proc


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK  # utime + stime


class CostSampler:
    """Samples a process's RSS and CPU time every SAMPLE_PERIOD, to split rest from burst later."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []  # (wall, rss MB, cpu s)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.samples.append((time.time(), rss_mb(self.pid), cpu_seconds(self.pid)))
            await asyncio.sleep(SAMPLE_PERIOD)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()

    def window(self, start: float, end: float) -> tuple[float, float, float]:
        """(mean RSS, peak RSS, CPU seconds per minute) between two wall times, widened to the
        samples either side so that a burst shorter than the sampling period still has two."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        inside = before[-1:] + [s for s in self.samples if start < s[0] < end] + after[:1]
        if len(inside) < 2:
            return float("nan"), float("nan"), float("nan")
        rss = [s[1] for s in inside]
        cpu = (inside[-1][2] - inside[0][2]) / (inside[-1][0] - inside[0][0]) * 60
        return statistics.fmean(rss), max(rss), cpu

    def cpu_between(self, start: float, end: float) -> float:
        """CPU seconds between two wall times, interpolated between the samples either side."""
        return self._cpu_at(end) - self._cpu_at(start)

    def _cpu_at(self, at: float) -> float:
        before = [s for s in self.samples if s[0] <= at][-1:]
        after = [s for s in self.samples if s[0] >= at][:1]
        if not before or not after:
            return float("nan")
        (t0, _, c0), (t1, _, c1) = before[0], after[0]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (at - t0) / (t1 - t0)


# Watching Jobs from outside both controllers


class JobWatcher:
    """Records when each Job's ADDED event arrives, for Jobs carrying this run's label or its raw
    creates' (raw_create), and which Jobs exist and have finished."""

    def __init__(self, api: KubeApi, run_id: str) -> None:
        self.arrivals: dict[str, tuple[float, datetime | None]] = {}  # uid -> (arrival, slot)
        self.present: dict[str, tuple[str, bool]] = {}  # uid -> (namespace, finished)
        self.seen: dict[str, tuple[int, float]] = {}  # namespace -> (arrivals, the last one)
        self.owners: dict[str, str] = {}  # uid -> the name of the object that created the Job
        query = [("labelSelector", f"{RUN_LABEL} in ({run_id},{raw_label(run_id)})")]
        self._watch = ListWatch(api, resource_path(JOBS), self, query, server_timeout=600)
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._arrived = asyncio.Event()  # set by each arrival, for all_seen()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._watch.run())
        await self._ready.wait()

    def stop(self) -> None:
        if self._task:
            self._task.cancel()

    # The list-then-watch's observer: a Job's first sighting is its arrival.

    def listed_item(self, obj: dict[str, Any]) -> None:
        """After a 410, the new listing brings the Jobs created while no watch was open: late
        arrivals (stamped now), not missing ones."""
        self.changed("ADDED", obj)

    def listed(self, version: str) -> None:
        self._ready.set()

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        if event_type == "DELETED":
            self.present.pop(metadata["uid"], None)
            return
        conditions = (obj.get("status") or {}).get("conditions") or []
        finished = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in conditions
        )
        self.present[metadata["uid"]] = (metadata.get("namespace", ""), finished)
        if event_type != "ADDED":
            return
        annotations = metadata.get("annotations") or {}
        slot = parse_time(annotations.get(ANNOTATION_SCHEDULED_AT) or annotations.get(CRONJOB_SLOT))
        if metadata["uid"] not in self.arrivals:
            now, namespace = time.time(), metadata.get("namespace", "")
            self.arrivals[metadata["uid"]] = (now, slot)
            owners = metadata.get("ownerReferences") or [{}]
            self.owners[metadata["uid"]] = owners[0].get("name", "")
            self.seen[namespace] = (self.seen.get(namespace, (0, now))[0] + 1, now)
            self._arrived.set()

    def failed(self, error: Exception) -> None:
        pass

    def jobs_in(self, namespace: str) -> tuple[int, int]:
        """The namespace's Jobs now, and how many of them the job controller has not finished
        (every controller's model holds those too)."""
        states = [finished for ns, finished in self.present.values() if ns == namespace]
        return len(states), states.count(False)

    async def all_seen(self, namespace: str, n: int, limit: float = 60.0) -> float:
        """When the last of the `n` Jobs created in `namespace` arrived."""
        deadline = asyncio.get_running_loop().time() + limit
        while (seen := self.seen.get(namespace, (0, 0.0)))[0] < n:
            self._arrived.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._arrived.wait()
            except TimeoutError:
                raise RuntimeError(
                    f"the watcher saw {seen[0]} of the {n} Jobs in {namespace}"
                ) from None
        return seen[1]

    def lags_by_owner(self, slot: datetime) -> dict[str, float]:
        """The lag of each Job of `slot`, by the name of the object that created it."""
        return {
            self.owners.get(uid, ""): arrived - slot.timestamp()
            for uid, (arrived, at) in self.arrivals.items()
            if at == slot
        }

    def lags_for(self, slots: Iterable[datetime]) -> list[tuple[datetime, float, float]]:
        wanted = set(slots)
        return [
            (slot, arrived, arrived - slot.timestamp())
            for arrived, slot in self.arrivals.values()
            if slot in wanted
        ]


# Creating objects


async def gather_bounded(calls: Iterable[Awaitable[Any]], limit: int) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> Any:
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


def raw_label(run_id: str) -> str:
    """The run label of the raw creates' Jobs: seen by the watcher, never due at a slot."""
    return f"{run_id}-raw"


def job_template(run_id: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {RUN_LABEL: run_id}},
        "spec": {"backoffLimit": 0, "template": kwok_pod_template()},
    }


def scheduled(
    kind: str, name: str, namespace: str, run_id: str, schedule: str = "* * * * *"
) -> dict[str, Any]:
    """The same object for either controller, every minute unless told: a ScheduledJob or a
    CronJob."""
    api_version = "cronlease.io/v1alpha1" if kind == "ScheduledJob" else "batch/v1"
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": schedule,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": job_template(run_id),
        },
    }


async def create_namespace(api: KubeApi, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await api.request("POST", resource_path(NAMESPACES), body)


async def delete_namespace(api: KubeApi, name: str) -> None:
    try:
        await api.request("DELETE", resource_path(NAMESPACES, name=name))
    except ApiError as error:
        if error.status != 404:
            raise


async def remove_leftovers(api: KubeApi) -> None:
    """An interrupted run leaves its objects firing every minute: they would skew this one."""
    names = [
        item["metadata"]["name"]
        for item in (await api.request("GET", resource_path(NAMESPACES)))["items"]
        if item["metadata"]["name"].startswith("bench-")
    ]
    await delete_namespaces(api, names)


async def delete_collection(api: KubeApi, path: str) -> None:
    """The API server cuts a request off after a minute; a collection of thousands may need
    several (each deletes what it can in its minute). A resource not installed (404: no chart,
    for bench/jobshape.py) has nothing to delete."""
    for _ in range(COLLECTION_DELETE_ATTEMPTS):
        try:
            await api.request(
                "DELETE", path, {"propagationPolicy": "Background"}, request_timeout=90
            )
            return
        except (TransportError, ApiError) as error:
            if isinstance(error, ApiError) and error.status == 404:
                return
            if isinstance(error, ApiError) and error.status not in (429, 500, 503, 504):
                raise
            print(f"  deleting {path}: {error!r}; again", flush=True)
    print(f"  {path} not emptied; the namespace controller finishes it", flush=True)


async def delete_namespaces(api: KubeApi, names: list[str]) -> None:
    """Stop everything in them firing, then give the namespace controller up to NAMESPACE_GRACE
    to finish: the clean-up of thousands of Jobs and pods, at kube-controller-manager's default
    20 requests/s, would otherwise load the control plane during the next phase. The objects
    that fire go by one collection delete each, which the API server does itself, at once."""
    for name in names:
        for collection in FIRING:
            await delete_collection(api, resource_path(collection, name))
        await delete_namespace(api, name)
    deadline = time.monotonic() + NAMESPACE_GRACE
    while names and time.monotonic() < deadline:
        remaining = {
            item["metadata"]["name"]
            for item in (await api.request("GET", resource_path(NAMESPACES)))["items"]
        }
        names = [name for name in names if name in remaining]
        await asyncio.sleep(1)
    if names:
        print(f"  still terminating after {NAMESPACE_GRACE:.0f} s, going on: {names}", flush=True)


def next_minute(after: float) -> datetime:
    return datetime.fromtimestamp((int(after) // 60 + 1) * 60, UTC)


def firing_only_at(slots: list[datetime]) -> str:
    """A cron expression that fires at these consecutive minutes (at most MAX_SLOTS of them) and
    at no other time within 45 minutes either side: at the same minutes of every hour."""
    assert len(slots) <= MAX_SLOTS, f"at most {MAX_SLOTS} measured slots"
    return ",".join(str(slot.minute) for slot in slots) + " * * * *"


async def wait_until(instant: float) -> None:
    await asyncio.sleep(max(0.0, instant - time.time()))


async def profile_from(profiler: Profiler | None, name: str, at: float, operator: bool) -> None:
    if profiler is not None:
        await wait_until(at)
        await profiler.take(name, operator)


# The phases


async def run_phase(
    api: KubeApi,
    watcher: JobWatcher,
    controller: str,
    n: int,
    slots: int,
    run_id: str,
    sampler: CostSampler,
    profiler: Profiler | None = None,
) -> Phase:
    namespace = f"bench-{controller}-{n}-{uuid.uuid4().hex[:5]}"
    await create_namespace(api, namespace)
    kind = "ScheduledJob" if controller == "cronlease" else "CronJob"
    path = resource_path(SCHEDULEDJOBS if controller == "cronlease" else CRONJOBS, namespace)
    names = [f"b{i:05d}" for i in range(n)]
    created = time.time()
    await gather_bounded(
        (
            api.request("POST", path, scheduled(kind, name, namespace, run_id, DORMANT))
            for name in names
        ),
        CREATE_CONCURRENCY,
    )
    ready = time.time()
    print(f"  {controller}: created {n} objects in {ready - created:.1f} s", flush=True)
    if controller == "cronlease":
        ready = await wait_settled(api, path, n)
        print(f"  {controller}: all {n} acknowledged in status after {ready - created:.1f} s")
    measured = await arm(api, path, names, controller, slots, ready - created)
    first = measured[0]
    phase = Phase(controller, n, [s.isoformat() for s in measured], expected=n * slots)
    # From just before the slot: the burst is the operator's wake-up and its creations.
    profiling = asyncio.create_task(
        profile_from(profiler, f"{controller}-{n}", first.timestamp() - 0.2, kind == "ScheduledJob")
    )
    unrecorded = [
        asyncio.create_task(unrecorded_before(api, path, before, slot))
        for before, slot in itertools.pairwise(measured)
        if controller == "cronlease"
    ]
    deadline = measured[-1].timestamp() + 55
    while time.time() < deadline:
        if len(watcher.lags_for(measured)) >= n * slots:
            break
        await asyncio.sleep(0.5)
    found = watcher.lags_for(measured)
    for task, slot in zip(unrecorded, measured[1:], strict=False):
        phase.behind.append(behind_split(watcher.lags_by_owner(slot), await task))
        print(f"  {controller}: slot {slot:%H:%M}: {_behind(phase.behind[-1])}", flush=True)
    phase.lags = [lag for _, _, lag in found]
    phase.missing = n * slots - len(found)
    phase.bursts = [burst_of(found, slot, n) for slot in measured]
    ended = [burst for burst in phase.bursts if burst is not None]
    if len(ended) == len(phase.bursts):
        phase.burst_seconds = statistics.fmean(ended)
    # The costs are the first slot's, to its last Job (of those that came)
    first_last = max(arrivals_at(found, first), default=math.nan)
    first_burst = first_last - first.timestamp()
    rest = sampler.window(first.timestamp() - 0.5 - REST_WINDOW, first.timestamp() - 0.5)
    burst = sampler.window(first.timestamp(), first.timestamp() + max(first_burst, 0) + 3)
    phase.rest_rss_mb, phase.rest_cpu_s_per_min = rest[0], rest[2]
    phase.peak_rss_mb, phase.burst_cpu_s_per_min = burst[1], burst[2]
    await profiling
    if controller == "cronlease":  # the sampler follows the operator: CronJob's CPU is not in it
        burst_cpu = sampler.cpu_between(first.timestamp(), first_last)
        phase.burst_cpu_ms_per_job = burst_cpu / n * 1000
        phase.after_rss_mb, phase.after_quiet_s = await rest_after_bursts(api, path, names, sampler)
        phase.after_jobs, phase.after_unfinished = watcher.jobs_in(namespace)
        phase.after_created = len(watcher.lags_for(measured))
        phase.after_skipped = await skipped_slots(api, path)
        phase.unaccounted = phase.expected - phase.after_created - sum(phase.after_skipped.values())
        await asyncio.sleep(SETTLE + REST_WINDOW)
        phase.settled_rss_mb = sampler.window(time.time() - REST_WINDOW, time.time())[0]
        print(
            f"  {controller}: at rest {phase.after_quiet_s:.0f} s after suspending: "
            f"RSS {phase.after_rss_mb:.0f} MB ({phase.settled_rss_mb:.0f} MB {SETTLE:.0f} s "
            f"later), {phase.after_jobs} Jobs ({phase.after_unfinished} unfinished); "
            f"of {phase.expected} slots {phase.after_created} created, skipped "
            f"{phase.after_skipped or 'none'}, {phase.unaccounted} unaccounted",
            flush=True,
        )
    print(
        f"  {controller}: N={n} p50={_lag(phase.percentile(0.5))} "
        f"p99={_lag(phase.percentile(0.99))} "
        f"max={max(phase.lags, default=float('nan')):.3f} missing={phase.missing} "
        f"bursts={', '.join(_lag(b) for b in phase.bursts)} s",
        flush=True,
    )
    await delete_namespaces(api, [namespace])
    return phase


def arrivals_at(found: list[tuple[datetime, float, float]], slot: datetime) -> list[float]:
    """When the Jobs of `slot` arrived, of the (slot, arrival, lag) `found`."""
    return [arrived for at, arrived, _ in found if at == slot]


async def unrecorded_before(
    api: KubeApi, path: str, before: datetime, slot: datetime
) -> set[str] | None:
    """The ScheduledJobs whose status had not recorded the slot `before` BEHIND_LEAD seconds
    ahead of `slot`: their follow-up writes (status, then releases) were still queued. One list
    from the API server's cache, a moment before the burst rather than in it. None if the list
    failed: not read is not none behind."""
    await asyncio.sleep(max(0.0, slot.timestamp() - BEHIND_LEAD - time.time()))
    try:
        items = (await api.request("GET", path, query=[("resourceVersion", "0")]))["items"]
    except Exception as error:  # a diagnostic: its failure must not end the phase
        print(f"  could not read which ScheduledJobs were behind: {error}", flush=True)
        return None
    behind = set()
    for item in items:
        recorded = parse_time((item.get("status") or {}).get("lastScheduleTime"))
        if recorded is None or recorded < before:
            behind.add(item["metadata"]["name"])
    return behind


def behind_split(lags: dict[str, float], behind: set[str] | None) -> dict[str, Any]:
    """A slot's lags split by whether their ScheduledJob was `behind` (see unrecorded_before):
    how many of each, and the median and largest lag of each (None where there are none). Not
    split (both None) if which were behind was not read."""
    if behind is None:
        return {"behind": None, "recorded": None}

    def summary(values: list[float]) -> dict[str, Any]:
        if not values:
            return {"jobs": 0, "p50": None, "max": None}
        return {"jobs": len(values), "p50": nearest_rank(values, 0.5), "max": max(values)}

    return {
        "behind": summary([lag for name, lag in lags.items() if name in behind]),
        "recorded": summary([lag for name, lag in lags.items() if name not in behind]),
    }


def _behind(split: dict[str, Any]) -> str:
    def jobs(group: dict[str, Any]) -> str:
        if not group["jobs"]:
            return "0 Jobs"
        return f"{group['jobs']} Jobs (p50 {group['p50']:.2f} s, max {group['max']:.2f} s)"

    if split["behind"] is None:
        return "which ScheduledJobs had not recorded the slot before: not read"
    return (
        f"of ScheduledJobs that had not recorded the slot before {BEHIND_LEAD:.0f} s ahead of "
        f"it, {jobs(split['behind'])}; of the others, {jobs(split['recorded'])}"
    )


def burst_of(found: list[tuple[datetime, float, float]], slot: datetime, n: int) -> float | None:
    """From `slot` to the arrival of its last Job; None if fewer than `n` came: a burst that
    never ended within the window."""
    arrivals = arrivals_at(found, slot)
    return max(arrivals) - slot.timestamp() if len(arrivals) >= n else None


async def rest_after_bursts(
    api: KubeApi, path: str, names: list[str], sampler: CostSampler
) -> tuple[float, float]:
    """The operator's RSS at rest after the bursts, with every ScheduledJob and its Jobs still
    in its model: with a slot every minute it never comes to rest at N=5000 (a burst's writes
    take most of the minute), so the ScheduledJobs are suspended, and the RSS is the mean over
    the first REST_WINDOW seconds in which it used under QUIET_CPU of a core. (RSS, seconds from
    suspending to that quiet); NaN if it never came within QUIET_LIMIT seconds."""
    started = time.time()
    await patch_each(api, path, names, {"spec": {"suspend": True}})
    while time.time() < started + QUIET_LIMIT:
        end = time.time()
        rss, _, cpu = sampler.window(end - REST_WINDOW, end)
        if end - started >= REST_WINDOW and cpu / 60 < QUIET_CPU:
            return rss, end - REST_WINDOW - started
        await asyncio.sleep(1.0)
    return float("nan"), float("nan")


async def skipped_slots(api: KubeApi, path: str) -> dict[str, int]:
    """The slots the ScheduledJobs in `path` recorded as skipped, by reason (status.slotsSkipped).
    The objects are created dormant and armed for the measured slots alone, so every skip counted
    is one of those."""
    skipped: dict[str, int] = {}
    items = (await api.request("GET", path, query=[("resourceVersion", "0")]))["items"]
    for item in items:
        for reason, count in ((item.get("status") or {}).get("slotsSkipped") or {}).items():
            skipped[reason] = skipped.get(reason, 0) + int(count)
    return skipped


async def arm(
    api: KubeApi, path: str, names: list[str], controller: str, slots: int, setup_s: float
) -> list[datetime]:
    """Gives the objects, created DORMANT, a schedule that fires at the measured slots alone, and
    returns those. Had they fired every minute from their creation, the slots before the measured
    ones would still be at work in them at N=5000 (how many slots the setup spans varied from
    run to run, and the readings with it: design note 106). The first slot is far enough out
    for the rewrite to settle in ARM_SETUPS times as long as the creation did; if it was not,
    a later one."""
    margin = ARM_SETUPS * setup_s + ARM_LEAD
    for _ in range(ARM_ATTEMPTS):
        started = time.time()
        first = next_minute(started + margin)
        measured = [datetime.fromtimestamp(first.timestamp() + 60 * i, UTC) for i in range(slots)]
        await patch_each(api, path, names, {"spec": {"schedule": firing_only_at(measured)}})
        ready = time.time()
        if controller == "cronlease":
            ready = await wait_settled(api, path, len(names), first)
        if ready <= first.timestamp() - ARM_LEAD:
            print(f"  {controller}: armed for {first:%H:%M} in {ready - started:.1f} s", flush=True)
            return measured
        margin = 2 * (ready - started) + ARM_LEAD
        print(f"  {controller}: settled too late for {first:%H:%M}; again", flush=True)
    raise RuntimeError(f"the objects in {path} never settled {ARM_LEAD:.0f} s before a slot")


async def patch_each(api: KubeApi, path: str, names: list[str], patch: dict[str, Any]) -> None:
    await gather_bounded(
        (
            api.request(
                "PATCH", f"{path}/{name}", patch, content_type="application/merge-patch+json"
            )
            for name in names
        ),
        CREATE_CONCURRENCY,
    )


async def wait_settled(api: KubeApi, path: str, n: int, next_slot: datetime | None = None) -> float:
    """When the operator has written every ScheduledJob's status for its spec (the template's dry
    run, the next schedule time: `next_slot` when given): from then on it is at rest until the
    slot."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if next_slot is not None and time.time() >= next_slot.timestamp():
            return time.time()  # too late for it: arm() aims at a later one
        items = (await api.request("GET", path, query=[("resourceVersion", "0")]))["items"]
        nexts = [(item.get("status") or {}).get("nextScheduleTime") for item in items]
        if sum(1 for at in nexts if at and next_slot in (None, parse_time(at))) >= n:
            return time.time()
        await asyncio.sleep(max(2.0, n / 1000))  # each poll lists them all: keep it light
    raise RuntimeError(f"the operator never acknowledged all {n} ScheduledJobs in {path}")


@dataclass(frozen=True)
class RawCreate:
    jobs_per_s: float  # to the last Job's arrival at the outside watcher, as a burst is timed
    answered_jobs_per_s: float  # to the last create's response
    client_cpu_s: float  # the bench process's CPU meanwhile: the client, and its Job watch


async def raw_create(
    api: KubeApi,
    watcher: JobWatcher,
    n: int,
    run_id: str,
    suspended: bool,
    ours: bool = False,
    profiler: Profiler | None = None,
) -> RawCreate:
    """Jobs/s a plain client gets when it creates N Jobs at once. Jobs of the controllers'
    template (pods follow, through the Job controller and kwok) are the fair reference, bare of
    what each controller adds; suspended ones, with no pods, show what the API server alone can
    take. With `ours`, the Jobs the operator builds from that template instead (hack/
    operator_jobs.py): what its burst would take were the operator free, so that the burst's
    ratio to it is what the operator itself adds. Timed as a burst is: from the first request to
    the last Job's ADDED event at the same outside watcher. The client's CPU is set beside the
    operator's: on this machine every core-second either spends is one the control plane does
    not get."""
    namespace = f"bench-raw-{n}-{uuid.uuid4().hex[:5]}"
    await create_namespace(api, namespace)
    label = raw_label(run_id)
    if ours:
        jobs = await operator_jobs(api, scheduled("ScheduledJob", "owner", namespace, label), n)
    else:
        template = job_template(label)
        jobs = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": f"raw-{i:05d}",
                    "namespace": namespace,
                    **template["metadata"],
                },
                "spec": dict(template["spec"]),
            }
            for i in range(n)
        ]
    for job in jobs:
        job["spec"]["suspend"] = suspended
    name = f"raw{'-ours' if ours else ''}{'-suspended' if suspended else ''}-{n}"
    profiling = asyncio.create_task(profile_from(profiler, name, time.time(), operator=False))
    started, cpu = time.time(), time.process_time()
    await gather_bounded((api.create_job(job) for job in jobs), CREATE_CONCURRENCY)
    answered, cpu = time.time() - started, time.process_time() - cpu
    seen = await watcher.all_seen(namespace, n) - started
    await profiling
    await delete_namespaces(api, [namespace])
    return RawCreate(n / seen, n / answered, cpu)


async def raw_create_paced(
    api: KubeApi, watcher: JobWatcher, n: int, run_id: str, slots: int
) -> list[float | None]:
    """The raw create of our Jobs as the slots come: `slots` batches of N, a slot period apart,
    into one namespace where the earlier batches stay, as a controller's Jobs do (their pods
    still being made by the job controller at its 20 requests a second). A raw create into an
    empty namespace is the reference for the first slot alone; a later slot's burst meets the
    Jobs of the ones before, and this is what a plain client meets there. Each batch is timed
    as a burst is, from its first request to its last Job's ADDED event; None if its Jobs were
    not all seen within two periods, and then the later batches are not made. A batch that
    overruns its period delays the next, where a controller's next slot would not wait: the
    delay is printed."""
    namespace = f"bench-paced-{n}-{uuid.uuid4().hex[:5]}"
    await create_namespace(api, namespace)
    times: list[float | None] = [None] * slots
    try:
        label = raw_label(run_id)
        owner = scheduled("ScheduledJob", "owner", namespace, label)
        jobs = await operator_jobs(api, owner, n * slots)
        start = time.time()
        for index in range(slots):
            due = start + index * SLOT_PERIOD
            await wait_until(due)
            began = time.time()
            if began - due > 1.0:
                print(f"  paced batch {index + 1} began {began - due:.1f} s late", flush=True)
            batch = jobs[index * n : (index + 1) * n]
            await gather_bounded((api.create_job(job) for job in batch), CREATE_CONCURRENCY)
            try:
                seen = await watcher.all_seen(namespace, n * (index + 1), limit=2 * SLOT_PERIOD)
            except RuntimeError as error:
                print(f"  paced batch {index + 1}: {error}", flush=True)
                break
            times[index] = seen - began
    finally:
        await delete_namespaces(api, [namespace])
    return times


# Reporting


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# cronlease vs CronJob ({results['started']})",
        "",
        f"Machine: {results['machine']}; "
        f"{results.get('controller_manager', 'kube-controller-manager: its rate not recorded')}. "
        "N objects due at the same instant, once a minute; "
        f"{results['slots']} measured slot(s) per controller and N"
        f"{_small_slots(results)}. Lag = Job ADDED event at an outside watcher - slot.",
        "",
        "Raw create: a plain client creating the same N Jobs at once (64 in flight, as the "
        "operator), before both controllers and after them (at N <= "
        f"{SMALL_N}, {RAW_ROUNDS_SMALL} times each), at the mean of their times, "
        "each from its first request to its last Job's ADDED event at the outside watcher; "
        "burst = slot to the last Job of that slot at the same watcher, at the mean over the "
        "measured slots. Suspended: Jobs with no pods, "
        "the API server alone. The objects are created with a schedule that does not fire, "
        "then given one that fires at the measured slots alone, so no earlier slot's work runs "
        "into them. Before the slot: the 8 s before the first measured slot, once the "
        "operator has written every ScheduledJob's status for that schedule. "
        "At rest after: once the measured slots "
        "are over, the ScheduledJobs are suspended, and the RSS is the mean over the first 8 s "
        "in which the operator used under 5% of a core, with every ScheduledJob and its Jobs "
        "still in its model (the target's reading); settled: the mean over 8 s, 30 s later, "
        "once idle connections have closed and the heap has been trimmed. Unfinished: Jobs "
        "the job controller had not yet run to the end "
        "(at its default client rate of 20 requests a second it falls behind a burst of "
        "thousands); every one stays in the model.",
        "",
        "A percentile counts every Job due; 'missed' means it falls among the Jobs that never "
        "came within the window (the slot plus 55 s).",
        "",
        "Raw data, every Job's lag included: [latest.json](latest.json).",
        "",
        "| N | controller | jobs | missing | p50 s | p90 s | p99 s | max s | p99 ours/theirs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, entry in results["by_n"].items():
        ours, theirs = entry["cronlease"], entry["cronjob"]
        for row in (ours, theirs):
            cells = [n, row["controller"], row["jobs"], row["missing"]]
            cells += [_lag(row[key]) for key in ("p50", "p90", "p99", "max")]
            cells.append(_ratio(ours["p99"], theirs["p99"]) if row is ours else "")
            lines.append(_row(cells))
    lines += [
        "",
        "| N | raw create Jobs/s | raw time s | our burst s (each slot's) | burst / raw "
        "| raw suspended Jobs/s "
        "| operator RSS MB before the slot | peak RSS MB | RSS MB at rest after (settled) | "
        "Jobs at rest after (unfinished) | rest RSS per ScheduledJob | CPU s/min before the slot "
        "| CPU s/min burst |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, entry in results["by_n"].items():
        ours = entry["cronlease"]
        raw_time = int(n) / entry["raw_jobs_per_s"]
        per_sj = (ours["after_rss_mb"] - results["baseline_rss_mb"]) / int(n)
        cells = [
            n,
            f"{entry['raw_jobs_per_s']:.0f}",
            f"{raw_time:.2f}",
            f"{_lag(ours['burst_seconds'], 2)} ({_bursts(ours)})",
            _burst_ratio(ours["burst_seconds"], raw_time),
            f"{entry.get('raw_suspended_jobs_per_s', float('nan')):.0f}",
            f"{ours['rest_rss_mb']:.0f}",
            f"{ours['peak_rss_mb']:.0f}",
            f"{ours['after_rss_mb']:.0f} ({ours.get('settled_rss_mb', math.nan):.0f})",
            f"{ours.get('after_jobs', 0)} ({ours.get('after_unfinished', 0)})",
            f"{per_sj * 1024:.1f} KB",
            f"{ours['rest_cpu_s_per_min']:.1f}",
            f"{ours['burst_cpu_s_per_min']:.1f}",
        ]
        lines.append(_row(cells))
    lines += [
        "",
        "CPU per Job: the operator's from the slot to the last Job of its first burst, and the "
        "raw create's client's (the bench process, its Job watch included) over its create. "
        + (
            "The control plane has a core of its own, and they share the other."
            if results.get("pinned")
            else "The control plane shares the machine's cores with both."
        ),
        "",
        "| N | operator CPU ms per Job in its burst | raw client CPU ms per Job |",
        "|---|---|---|",
    ]
    lines += [
        _row(
            [
                n,
                f"{entry['cronlease'].get('burst_cpu_ms_per_job', math.nan):.2f}",
                f"{entry.get('raw_client_cpu_ms_per_job', math.nan):.2f}",
            ]
        )
        for n, entry in results["by_n"].items()
    ]
    lines += [
        "",
        "The raw create of our own Jobs: the same client creating the Jobs the operator builds "
        "(hack/operator_jobs.py), also before both controllers and after them. What the burst "
        "takes beyond it is what the operator adds; what it takes beyond the bare Jobs is "
        "what the operator's Job costs the control plane (bench/results/jobshape.md).",
        "",
        "| N | raw create of the bare Jobs s | of our Jobs s | ours / bare | our burst s "
        "| burst / raw of our Jobs |",
        "|---|---|---|---|---|---|",
    ]
    for n, entry in results["by_n"].items():
        if "raw_ours_jobs_per_s" not in entry:
            continue  # a run from before this reference
        bare, own = int(n) / entry["raw_jobs_per_s"], int(n) / entry["raw_ours_jobs_per_s"]
        burst = entry["cronlease"]["burst_seconds"]
        cells = [n, f"{bare:.2f}", f"{own:.2f}", f"{own / bare:.2f}", _lag(burst, 2)]
        lines.append(_row([*cells, _burst_ratio(burst, own)]))
    lines += _paced(results)
    lines += [
        "",
        f"Operator baseline RSS with no ScheduledJobs: {results['baseline_rss_mb']:.0f} MB.",
        "",
    ]
    lines += ["Targets:", ""] + [f"- {t}" for t in results["targets"]]
    return "\n".join(lines) + "\n"


def _paced(results: dict[str, Any]) -> list[str]:
    """Each slot's burst beside the raw create of our Jobs made as the slots come (--paced)."""
    paced = {n: entry for n, entry in results["by_n"].items() if "raw_ours_paced_s" in entry}
    if not paced:
        return []
    lines = [
        "",
        "The raw create of our Jobs as the slots come (`--paced`): a batch of N a minute apart, "
        "into one namespace where the earlier batches stay, as a controller's Jobs do. Each "
        "slot's burst beside the batch that met the same Jobs before it.",
        "",
        "| N | slot | our burst s | raw create of our Jobs as the slots come s | burst / raw |",
        "|---|---|---|---|---|",
    ]
    for n, entry in paced.items():
        for index, (burst, raw) in enumerate(_slot_pairs(entry)):
            cells = [n, index + 1, _lag(burst, 2), _lag(raw, 2), _burst_ratio(burst, raw)]
            lines.append(_row(cells))
    return lines


def _slot_pairs(entry: dict[str, Any]) -> list[tuple[float | None, float | None]]:
    """Each measured slot's burst and its paced batch (None: it never ended)."""
    bursts = entry["cronlease"].get("bursts", [])
    paced = entry["raw_ours_paced_s"]
    return [
        (bursts[index] if index < len(bursts) else None, raw) for index, raw in enumerate(paced)
    ]


def _small_slots(results: dict[str, Any]) -> str:
    """The slots at N <= SMALL_N, where they differ (runs before design note 122 had none)."""
    small = results.get("small_slots", results["slots"])
    return "" if small == results["slots"] else f" ({small} at N <= {SMALL_N})"


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _lag(value: float | None, digits: int = 3) -> str:
    return "missed" if value is None else f"{value:.{digits}f}"


def _bursts(ours: dict[str, Any]) -> str:
    return ", ".join(_lag(burst, 2) for burst in ours.get("bursts", []))


def _ratio(ours: float | None, theirs: float | None) -> str:
    if theirs is None:
        return "theirs missed" if ours is not None else "both missed"
    return "ours missed" if ours is None else f"{ours / theirs:.2f}"


def _burst_ratio(burst: float | None, raw: float | None) -> str:
    return "missed" if burst is None or not raw else f"{burst / raw:.2f}"


def lease_record(operator: OperatorProcess) -> dict[str, Any]:
    """How often the operator stopped leading (its log says each time), and how long its Lease
    renewals took (cronlease_lease_renewal_seconds), over the whole run."""
    buckets: list[tuple[float, float]] = []
    for line in operator.metrics().splitlines():
        if line.startswith("cronlease_lease_renewal_seconds_bucket{"):
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((math.inf if bound == "+Inf" else float(bound), float(line.split()[-1])))
    total = max((count for _, count in buckets), default=0.0)
    within = next((bound for bound, count in sorted(buckets) if count >= total), math.nan)
    share = {bound: count / total for bound, count in buckets if total and bound in (0.1, 0.5, 1)}
    shares = ", ".join(f"{100 * part:.1f}% within {bound:g} s" for bound, part in share.items())
    # Each loss, with its time as the log gives it (the host's local time), to tell a loss in
    # a burst from one elsewhere in the run: on 2026-12-07 the machine itself was paused minutes
    # after the bursts, and the leader stepped down.
    losses = [line for line in operator.log().splitlines() if "stopped leading" in line]
    lost_at = [found.group() if (found := LOG_TIME.search(line)) else "?" for line in losses]
    return {
        "lost": len(losses),
        "lost_at": lost_at,
        "renewal_count": int(total),
        "renewals_all_within_s": within,
        "renewals": f"{int(total)} renewals, every one within {within:g} s; {shares}",
    }


def _no_later(ours: float | None, theirs: float | None) -> bool:
    """A missed percentile is later than any measured one."""
    return theirs is None or (ours is not None and ours <= theirs)


# Issue 34's targets: the burst against the raw create of the same Jobs (the operator's Job
# shape) at every N, and against the raw create of bare Jobs at N=1000 and 5000 on a shared
# machine; p99 against CronJob's at every N; the operator's RSS at rest with 5,000
# ScheduledJobs; and no Lease lost during the bursts.
OWN_LIMIT = 1.1
BARE_LIMITS = {1000: 1.3, 5000: 1.3}
RSS_LIMIT_MB = 100


def targets(results: dict[str, Any]) -> list[str]:
    verdicts = []
    for n, entry in results["by_n"].items():
        row = entry["cronlease"]
        burst = row["burst_seconds"]
        if "raw_ours_jobs_per_s" in entry:
            own = int(n) / entry["raw_ours_jobs_per_s"]
            verdicts.append(
                f"burst <= {OWN_LIMIT} x the raw create of the same Jobs at N={n}: "
                f"{_lag(burst, 2)} s vs {OWN_LIMIT * own:.2f} s, "
                f"{_verdict(burst is not None and burst <= OWN_LIMIT * own)} "
                f"(each slot: {_bursts(row)}; "
                f"{_burst_ratio(burst, own)} x)"
            )
        if "raw_ours_paced_s" in entry:
            pairs = _slot_pairs(entry)
            ok = all(slot is not None and raw and slot <= OWN_LIMIT * raw for slot, raw in pairs)
            each = "; ".join(
                f"{_lag(slot, 2)} s vs {_lag(raw, 2)} s, {_burst_ratio(slot, raw)} x"
                for slot, raw in pairs
            )
            verdicts.append(
                f"each slot's burst <= {OWN_LIMIT} x the raw create of the same Jobs as the slots "
                f"come at N={n}: {_verdict(ok)} (each slot: {each})"
            )
        limit = BARE_LIMITS.get(int(n))
        if limit is not None and not results.get("pinned"):
            raw = int(n) / entry["raw_jobs_per_s"]
            verdicts.append(
                f"burst <= {limit} x the raw create of bare Jobs at N={n}: {_lag(burst, 2)} s "
                f"vs {limit * raw:.2f} s, {_verdict(burst is not None and burst <= limit * raw)} "
                f"({_burst_ratio(burst, raw)} x)"
            )
    lease = results.get("lease")
    if lease is not None:
        verdicts.append(
            f"the leader never lost its Lease during the bursts: {lease['lost']} times lost"
            f"{' (at ' + ', '.join(lease['lost_at']) + ')' if lease.get('lost_at') else ''}, "
            f"{_verdict(lease['lost'] == 0)} ({lease['renewals']})"
        )
    for n, entry in results["by_n"].items():
        row = entry["cronlease"]
        if "unaccounted" in row:
            verdicts.append(
                f"every measured slot created or recorded as skipped at N={n}: "
                f"{row['after_created']} created, skipped {row['after_skipped'] or 'none'}, "
                f"{row['unaccounted']} unaccounted, {_verdict(row['unaccounted'] == 0)}"
            )
    for n, entry in results["by_n"].items():
        ours, theirs = entry["cronlease"]["p99"], entry["cronjob"]["p99"]
        verdicts.append(
            f"p99 <= CronJob's at N={n}: {_lag(ours)} vs {_lag(theirs)} s, "
            f"{_verdict(_no_later(ours, theirs) and ours is not None)}"
        )
    if "5000" in results["by_n"]:
        ours = results["by_n"]["5000"]["cronlease"]
        rest, peak = ours["after_rss_mb"], ours["peak_rss_mb"]
        verdicts.append(
            f"RSS <= {RSS_LIMIT_MB} MB at rest after the bursts at N=5000: {rest:.0f} MB, "
            f"{_verdict(rest <= RSS_LIMIT_MB)} "
            f"({ours.get('settled_rss_mb', math.nan):.0f} MB settled, {SETTLE:.0f} s later; "
            f"peak {peak:.0f} MB; "
            f"{ours['rest_rss_mb']:.0f} MB before the first measured slot; "
            f"{ours.get('after_jobs', 0)} Jobs in the namespace, "
            f"{ours.get('after_unfinished', 0)} of them not finished by the job controller)"
        )
    return verdicts


def cdf(phase: Phase) -> tuple[list[float], int]:
    """The arrivals' lags in order, and how many Jobs were due: the curve's y is the fraction of
    the Jobs due, so a controller that missed some never reaches 1 (normalised by arrivals, one
    that created half its Jobs would look as good as one that created them all)."""
    return sorted(phase.lags), len(phase.lags) + phase.missing


def plot(phases: list[Phase], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    styles = {"cronlease": "-", "cronjob": "--"}
    for phase in phases:
        if not phase.lags:
            continue
        ordered, due = cdf(phase)
        fractions = [(i + 1) / due for i in range(len(ordered))]
        missing = f", {phase.missing} of {due} missing" if phase.missing else ""
        axes.step(
            ordered,
            fractions,
            styles[phase.controller],
            where="post",
            label=f"{phase.controller} N={phase.n}{missing}",
        )
    axes.set_xscale("log")
    axes.set_xlabel("lag: Job ADDED at the watcher - slot (s, log scale)")
    axes.set_ylabel("fraction of the Jobs due (missing ones never arrive)")
    axes.set_ylim(0, 1.02)
    axes.set_title("Schedule lag CDF: cronlease vs CronJob")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    cluster = None if args.kubeconfig else ensure_cluster()
    kubeconfig = Path(args.kubeconfig) if cluster is None else cluster.kubeconfig
    controller_manager = controller_manager_rate(cluster.commands if cluster else {})
    machine = f"{os.cpu_count()} cores"
    if not args.pin:
        return await run(args, kubeconfig, controller_manager, machine)
    if cluster is None:
        raise SystemExit("--pin needs the local cluster, not --kubeconfig")
    # The operator, started by this process, inherits its CPU.
    with cpu_pinning.apart(cluster.pids.values(), os.getpid()) as shared:
        return await run(args, kubeconfig, controller_manager, f"{machine}, {shared}")


async def run(
    args: argparse.Namespace, kubeconfig: Path, controller_manager: str, machine: str
) -> dict[str, Any]:
    """The operator started as the chart's ServiceAccount, then measure()."""
    install_chart(kubeconfig)
    os.environ["KUBECONFIG"] = str(kubeconfig)
    api = connect(CREATE_CONCURRENCY)
    await remove_leftovers(api)  # before the operator starts, or it would load them
    work = Path(tempfile.mkdtemp(prefix="cronlease-bench-"))
    # The election settings a user runs (the operator's defaults): whether the leader keeps its
    # Lease through a burst of 5,000 is one of the things measured (lease_record).
    operator = OperatorProcess(
        service_account_kubeconfig(kubeconfig, work / "kubeconfig"),
        work,
        "bench-operator",
        PRODUCTION_ELECTION,
    )
    operator.start()
    try:
        return await measure(args, api, operator, controller_manager, machine)
    finally:
        operator.stop()  # also when the run fails: an orphan would keep the Lease
        await api.close()


def controller_manager_rate(commands: dict[str, list[str]]) -> str:
    """kube-controller-manager's client rate (the job and CronJob controllers'), from its command
    line: both controllers' throughput here is bounded by it."""
    command = commands.get("kube-controller-manager")
    if command is None:
        return "kube-controller-manager: not started by this bench (its rate unknown)"
    rate = [flag for flag in command if flag.startswith(("--kube-api-qps=", "--kube-api-burst="))]
    return "kube-controller-manager: " + (
        " ".join(rate) or "its default client rate (20 requests a second, bursts of 30)"
    )


async def measure(
    args: argparse.Namespace,
    api: KubeApi,
    operator: OperatorProcess,
    controller_manager: str,
    machine: str,
) -> dict[str, Any]:
    """`controller_manager` names kube-controller-manager's client rate in the report, and
    `machine` the cores and how they were shared."""
    deadline = time.monotonic() + 60
    while "scheduler: leading;" not in operator.log():  # leading, every collection listed
        if time.monotonic() > deadline:
            raise RuntimeError(f"the operator never became ready; see {operator.log_path}")
        await asyncio.sleep(0.2)
    run_id = uuid.uuid4().hex[:8]
    watcher = JobWatcher(api, run_id)
    await watcher.start()
    sampler = CostSampler(operator.pid)
    sampler.start()
    await asyncio.sleep(3)
    baseline = statistics.fmean(s[1] for s in sampler.samples[-3:])
    results: dict[str, Any] = {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "pinned": args.pin,
        "controller_manager": controller_manager,
        "baseline_rss_mb": baseline,
        "slots": args.slots,
        "small_slots": args.small_slots,
        "by_n": {},
        "operator_log": str(operator.log_path),
    }
    phases: list[Phase] = []
    try:
        for n in args.n:
            print(f"N={n}", flush=True)
            entry: dict[str, Any] = {}
            profiler = (
                Profiler(Path(args.profile), args.profile_seconds, operator.pid)
                if args.profile
                else None
            )
            # The raw create before both controllers and after them: a single one varied from
            # 296 to 562 Jobs/s between runs at N=1000; the ratios use the mean time.
            small = n <= SMALL_N
            rounds, slots = (RAW_ROUNDS_SMALL, args.small_slots) if small else (1, args.slots)
            raws: list[RawCreate] = []
            raws_ours: list[RawCreate] = []
            for _ in range(rounds):
                profiled = None if raws else profiler  # the first one's profile is enough
                raws.append(await raw_create(api, watcher, n, run_id, False, profiler=profiled))
                raws_ours.append(await raw_create(api, watcher, n, run_id, False, ours=True))
            for controller in ("cronlease", "cronjob"):
                phase = await run_phase(
                    api, watcher, controller, n, slots, run_id, sampler, profiler
                )
                phases.append(phase)
                entry[controller] = phase.summary()
            for _ in range(rounds):
                raws_ours.append(await raw_create(api, watcher, n, run_id, False, ours=True))
                raws.append(await raw_create(api, watcher, n, run_id, False))
            raw_rates = [raw.jobs_per_s for raw in raws]
            entry["raw_jobs_per_s_each"] = raw_rates
            entry["raw_answered_jobs_per_s_each"] = [raw.answered_jobs_per_s for raw in raws]
            entry["raw_jobs_per_s"] = n / statistics.fmean(n / rate for rate in raw_rates)
            ours_rates = [raw.jobs_per_s for raw in raws_ours]
            entry["raw_ours_jobs_per_s_each"] = ours_rates
            entry["raw_ours_jobs_per_s"] = n / statistics.fmean(n / rate for rate in ours_rates)
            entry["raw_client_cpu_ms_per_job"] = (
                statistics.fmean(raw.client_cpu_s for raw in raws) / n * 1000
            )
            if args.paced and not small and slots > 1:
                entry["raw_ours_paced_s"] = await raw_create_paced(api, watcher, n, run_id, slots)
                print(
                    "  raw create of our Jobs as the slots come: "
                    f"{', '.join(_lag(each, 2) for each in entry['raw_ours_paced_s'])} s",
                    flush=True,
                )
            suspended = await raw_create(api, watcher, n, run_id, suspended=True)
            entry["raw_suspended_jobs_per_s"] = suspended.jobs_per_s
            print(
                f"  raw create: {' and '.join(f'{rate:.0f}' for rate in raw_rates)} Jobs/s "
                f"(mean time: {entry['raw_jobs_per_s']:.0f}); of our Jobs "
                f"{' and '.join(f'{rate:.0f}' for rate in ours_rates)}; suspended (no pods) "
                f"{entry['raw_suspended_jobs_per_s']:.0f} Jobs/s",
                flush=True,
            )
            results["by_n"][str(n)] = entry
            write_partial(results, Path(args.out))
        results["lease"] = lease_record(operator)
    finally:
        sampler.stop()
        watcher.stop()
    results["targets"] = targets(results)
    results["phases"] = [asdict(p) for p in phases]
    write_results(results, phases, Path(args.out), plot_too=not args.no_plot)
    return results


def write_partial(results: dict[str, Any], out: Path) -> None:
    """After each N, so that an interrupted run keeps what it measured."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "partial.json").write_text(json.dumps(results, indent=2))


def write_results(results: dict[str, Any], phases: list[Phase], out: Path, plot_too: bool) -> None:
    """Replace the previous run's results: git keeps the history."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(results, indent=2))
    (out / "partial.json").unlink(missing_ok=True)
    report = markdown(results)
    (out / "latest.md").write_text(report)
    if plot_too:
        plot(phases, out / "latest-lag-cdf.png")
    print(report)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--slots", type=int, default=2, help="measured slots per controller and N")
    parser.add_argument(
        "--small-slots",
        type=int,
        default=4,
        help=f"measured slots per controller at N <= {SMALL_N}, where one slot is noise-sized",
    )
    parser.add_argument(
        "--paced",
        action="store_true",
        help=f"at N > {SMALL_N}, also the raw create of our Jobs as the slots come: a batch per "
        "slot, a minute apart, the earlier batches left in place (each slot's own reference)",
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--profile",
        help="a directory for CPU profiles of kube-apiserver and the operator during each "
        "first burst, with their tables of cumulative time (hack/burst_profiles.py)",
    )
    parser.add_argument(
        "--profile-seconds",
        type=int,
        default=DEFAULT_SECONDS,
        help="how long each profile lasts from the slot",
    )
    parser.add_argument(
        "--kubeconfig", help="an admin kubeconfig (default: start the local cluster)"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the control plane on the first core, the operator and the bench's client on the "
        "last (hack/cpu_pinning.py), for the whole run",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
