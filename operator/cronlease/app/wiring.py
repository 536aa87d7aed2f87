"""The composition root: every part of the operator built once, in one place, and started and
stopped in an order that is written down (docs/architecture.md).

Built: the API client, the Lease elector, the live model and the Runs' store, the watches that
feed them (every collection the operator reads: ScheduledJobs, Jobs, RunRequests, Runs, step Jobs,
heartbeat Leases), the applier, and the two controllers on the keyed loop (the scheduler, the
supervisor). Building does no I/O; `start` does, `stop` undoes it. app/main.py runs this under
kopf, which provides the process lifecycle, login and logging and watches nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import uuid
from collections.abc import Iterable
from typing import Any

import prometheus_client

from cronlease.app import health, heaptrim
from cronlease.core.bodies.runobject import run_info
from cronlease.core.names.distribution import version
from cronlease.core.names.jobinfo import job_info
from cronlease.shell import metrics, metricseries
from cronlease.shell.applier import Applier
from cronlease.shell.electorthread import ThreadedElector
from cronlease.shell.kube import KubeApi, connect
from cronlease.shell.leadership import ElectionConfig, Leadership, SoleLeader
from cronlease.shell.model import Key, Model
from cronlease.shell.modelwatch import JobWatch, ModelWatch, RunRequestWatch, ScheduledJobWatch
from cronlease.shell.runstore import RunStore
from cronlease.shell.runwatch import RunWatch
from cronlease.shell.scheduler import Scheduler
from cronlease.shell.servertime import ServerClock
from cronlease.shell.supervisor import Supervisor
from cronlease.shell.wakeups import WakeupQueue

log = logging.getLogger(__name__)

# A watch failing this long without a success fails liveness: after the probe's failures the
# pod restarts with fresh watches. Readiness fails sooner: not synced.
WATCH_STUCK_AFTER = 60.0
WATCH_UNSYNCED_AFTER = 5.0
# How long a graceful stop lets the reconciles in flight finish (their status writes, and the
# finalizers those release) before the Lease is given up; well within the pod's grace period.
SHUTDOWN_GRACE = 5.0


class Operator:
    """One replica: it watches always, and acts only while it leads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.identity = f"{args.identity}-{uuid.uuid4().hex[:6]}"
        self.namespaces: tuple[str, ...] = tuple(args.namespace)
        clock = ServerClock()
        self.api: KubeApi = connect(args.max_concurrency, clock.observe)
        self.leadership = leadership_from(args, self.identity)
        # Wake-ups on the same clock as decisions: with the host ahead, a slot's wake-up would
        # otherwise come early, find the slot not yet due, and ask to be woken at once, again.
        wakeups: WakeupQueue[Key] = WakeupQueue(clock=lambda: clock.now().timestamp())
        self.model = Model(
            wakeups.changed,
            on_job_finished=lambda job: count_result(self.leadership, job),
            on_job_change=wakeups.notify,
        )
        # Multi-step runs: the Runs as their ScheduledJobs' decisions see them, and the
        # supervisor's own view of Runs, step Jobs and heartbeat Leases, with its own wake-ups.
        runs = Model(wakeups.changed, on_job_change=wakeups.notify, read=run_info)
        run_wakeups: WakeupQueue[Key] = WakeupQueue(clock=lambda: clock.now().timestamp())
        store = RunStore(run_wakeups.notify, clock=clock.now)  # heartbeats seen, on it too
        self.run_watch = RunWatch(self.api, runs, store, self.namespaces)
        self._listings = [asyncio.Event() for _ in range(3)]
        self.listed = asyncio.Event()  # every collection listed: a new leader may decide
        sj_listed, jobs_listed, requests_listed = self._listings
        self.model_watches: tuple[ModelWatch[Model], ...] = (
            ScheduledJobWatch(self.api, self.model, self.namespaces, sj_listed),
            JobWatch(self.api, self.model, self.namespaces, jobs_listed),
            # Its resource counts as absent only once the ScheduledJobs (same group) are served.
            RunRequestWatch(self.api, self.model, self.namespaces, requests_listed, sj_listed),
        )
        # Readiness and liveness cover every watch.
        self.watches: tuple[ModelWatch[Any], ...] = (*self.model_watches, *self.run_watch.watches)
        applier = Applier(self.api, self.leadership, self.model, args.max_concurrency, runs=runs)
        self.scheduler = Scheduler(
            self.api,
            self.leadership,
            self.model,
            wakeups,
            self.listed,
            args.max_concurrency,
            applier=applier,
            clock=clock.now,  # "now" never runs ahead of the API server's clock
            prepare=True,  # bursts get ready before their instant (core.bodies.preparation)
        )
        self.supervisor = Supervisor(
            self.leadership,
            store,
            applier,
            run_wakeups,
            self.run_watch.listed.wait,
            clock=clock.now,
        )
        self.health = health.HealthChecks(
            liveness=lambda: first(w.stuck(WATCH_STUCK_AFTER) for w in self.watches),
            readiness=lambda: first(w.unsynced(WATCH_UNSYNCED_AFTER) for w in self.watches),
        )
        self._controllers: list[asyncio.Task[None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._health_server: Any = None
        self._stopped = False

    async def start(self) -> None:
        """Metrics and health first (probes answer from the start), then the watches (every
        replica keeps its model warm), the elector, and last the controllers, which act only
        while leading and once every collection is listed."""
        metrics.dead_letters.set_function(lambda: self.model.dead_letter_count)
        metrics.scheduledjobs.set_function(lambda: self.model.scheduledjob_count)
        metricseries.initialise(version())
        host, port = self.args.metrics_bind.rsplit(":", 1)
        prometheus_client.start_http_server(int(port), addr=host)
        self._health_server = await health.serve(self.args.health_bind, self.health)
        log.info(
            "cronlease %s starting; version %s; namespaces: %s",
            self.identity,
            version(),
            ", ".join(self.namespaces) or "all",
        )
        for watch in self.model_watches:
            self._spawn(watch.run(), f"{watch.noun} watch")
        self._spawn(self.run_watch.run(), "run watches")
        self._spawn(self._all_listed(), "listed")
        self._spawn(self.leadership.run(), "election")
        self._spawn(heaptrim.run(), "heap trim")
        self._controllers = [
            self._spawn(self.scheduler.run(), "scheduler"),
            self._spawn(self.supervisor.run(), "supervisor"),
        ]

    async def stop(self) -> None:
        """The reverse: stop acting first (nothing new starts, what is in flight finishes within
        SHUTDOWN_GRACE), then give the Lease up so a standby takes over at once (the elector stops
        itself inside release(), after any Lease write in flight), then stop watching and close
        the client. Twice is once (kopf's cleanup, then the caller's finally)."""
        if self._stopped:
            return
        self._stopped = True
        for task in self._controllers:
            task.cancel()
        try:
            await self.scheduler.finish(SHUTDOWN_GRACE)
            await self.supervisor.finish(SHUTDOWN_GRACE)
        finally:
            try:
                await self.leadership.release()
            finally:
                for task in self._tasks:
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                if self._health_server is not None:
                    await self._health_server.cleanup()
                await self.api.close()

    async def _all_listed(self) -> None:
        """A new leader decides once ScheduledJobs, Jobs, RunRequests and Runs are listed
        (Forbid counts either kind of run; a request missing from the model looks cancelled)."""
        for listing in self._listings:
            await listing.wait()
        await self.run_watch.listed.wait()
        self.listed.set()

    def _spawn(self, work: Any, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(work, name=name)
        task.add_done_callback(exit_if_failed)
        self._tasks.append(task)
        return task


def leadership_from(args: argparse.Namespace, identity: str) -> Leadership:
    if not args.leader_election:
        return SoleLeader(identity)
    config = ElectionConfig(
        namespace=args.lease_namespace,
        lease_name=args.lease_name,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    # Its own thread, loop and connections: a renewal must never wait for a burst of our own
    # Job creations and status writes, neither for the loop nor for a free connection.
    return ThreadedElector(lambda: connect(2), identity, config)


def first(reasons: Iterable[str | None]) -> str | None:
    return next((reason for reason in reasons if reason), None)


def count_result(leadership: Leadership, job: dict[str, Any]) -> None:
    """Counted by the leader only: every replica's model sees each Job finish, so a sum over
    replicas counts each Job once (one that finishes while no replica leads, in a failover's
    seconds, is not counted; a counter on every replica would count it once per replica)."""
    if not leadership.is_leading():
        return
    info = job_info(job)
    # A label value from a Job's annotation only when trusted: one of four known triggers.
    trigger = info.trigger if info.trusted else metricseries.UNTRUSTED_TRIGGER
    metrics.job_results.labels(info.state.value, trigger).inc()


def exit_if_failed(task: asyncio.Task[None]) -> None:
    """The controllers, the watches and the elector never return on their own (the listing's
    waiter and the heap trim may, harmlessly): if one of them dies, so does the process, so that
    Kubernetes restarts it, rather than leave a replica that watches and never acts (or acts on
    a model that no longer sees its objects)."""
    if task.cancelled() or task.exception() is None:
        return
    log.critical("%s died", task.get_name(), exc_info=task.exception())
    os._exit(70)  # EX_SOFTWARE
