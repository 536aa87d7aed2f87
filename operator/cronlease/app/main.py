"""`cronlease`: run the operator.

cronlease.shell.modelwatch watches ScheduledJobs and their Jobs (and, for multi-step runs,
cronlease.shell.runwatch the Runs, step Jobs and heartbeat Leases), kopf the RunRequests
(standalone: kopf's peering is not leader election and has no fencing); our scheduler loop runs
beside them on the same event loop and is the only thing that writes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, cast

import kopf
import prometheus_client

from cronlease.app import handlers, health, heaptrim
from cronlease.app.options import configure_logging, parse_args
from cronlease.core.bodies.runobject import run_info
from cronlease.core.names.distribution import version
from cronlease.core.names.jobinfo import job_info
from cronlease.shell import metrics, metricseries
from cronlease.shell.applier import Applier
from cronlease.shell.electorthread import ThreadedElector
from cronlease.shell.fenceprobe import fencing_refusal
from cronlease.shell.kube import LIST_PAGE, KubeApi, connect, login
from cronlease.shell.leadership import ElectionConfig, Leadership, SoleLeader
from cronlease.shell.model import Key, Model
from cronlease.shell.modelwatch import JobWatch, ScheduledJobWatch
from cronlease.shell.runstore import RunStore
from cronlease.shell.runwatch import RunWatch
from cronlease.shell.scheduler import Scheduler
from cronlease.shell.servertime import ServerClock
from cronlease.shell.supervisor import Supervisor
from cronlease.shell.wakeups import WakeupQueue

log = logging.getLogger("cronlease")


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["heartbeat"]:  # a step pod's sidecar (app.heartbeat), not the operator
        from cronlease.app import heartbeat

        heartbeat.main(argv[1:])
        return
    args = parse_args(argv)
    configure_logging(args.log_format, args.verbose)
    asyncio.run(run(args))


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the object) on every event, for change-detecting
    handlers; we register none, so nothing reads it. Building nothing saves that copy per event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast("kopf.BodyEssence", {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


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


# A watch (of ScheduledJobs or of Jobs) failing this long without a success fails liveness: after
# the probe's failures the pod restarts with fresh watches. Readiness fails sooner: not synced.
WATCH_STUCK_AFTER = 60.0
WATCH_UNSYNCED_AFTER = 5.0
# The exit status when the configuration cannot work (EX_CONFIG).
EXIT_CONFIG = 78
# How long a graceful stop lets the reconciles in flight finish (their status writes, and the
# finalizers those release) before the Lease is given up; well within the pod's grace period.
SHUTDOWN_GRACE = 5.0


async def run(args: argparse.Namespace) -> None:
    identity = f"{args.identity}-{uuid.uuid4().hex[:6]}"
    server_clock = ServerClock()
    api = connect(args.max_concurrency, server_clock.observe)
    namespaces = tuple(args.namespace)
    leadership = leadership_from(args, identity)
    if not args.leader_election:
        # A watched namespace is within the policy's scope; all are when all are watched.
        await refuse_if_fenced(api, (*namespaces, args.lease_namespace)[0], leadership)
    # Wake-ups on the same clock as decisions: with the host ahead, a slot's wake-up would
    # otherwise come early, find the slot not yet due, and ask to be woken at once, again.
    wakeups: WakeupQueue[Key] = WakeupQueue(clock=lambda: server_clock.now().timestamp())
    model = Model(
        wakeups.changed,
        on_job_finished=lambda job: _count_result(leadership, job),
        on_job_change=wakeups.notify,
    )
    # Multi-step runs (issue 17): the Runs as their ScheduledJobs' decisions see them, and the
    # supervisor's own view of Runs, step Jobs and heartbeat Leases, with its own wake-ups.
    runs = Model(wakeups.changed, on_job_change=wakeups.notify, read=run_info)
    run_wakeups: WakeupQueue[Key] = WakeupQueue(clock=lambda: server_clock.now().timestamp())
    store = RunStore(run_wakeups.notify, clock=server_clock.now)  # heartbeats seen, on it too
    run_watch = RunWatch(api, runs, store, namespaces)
    jobs_listed, scheduledjobs_listed = asyncio.Event(), asyncio.Event()
    everything_listed = asyncio.Event()
    applier = Applier(api, leadership, model, args.max_concurrency, runs=runs)
    scheduler = Scheduler(
        api,
        leadership,
        model,
        wakeups,
        everything_listed,
        namespaces,
        args.max_concurrency,
        applier=applier,
        clock=server_clock.now,  # "now" never runs ahead of the API server's clock
        prepare=True,  # bursts get ready before their instant (cronlease.core.bodies.preparation)
    )
    supervisor = Supervisor(
        leadership, store, applier, run_wakeups, run_watch.listed.wait, clock=server_clock.now
    )
    job_watch = JobWatch(api, model, namespaces, jobs_listed)
    scheduledjob_watch = ScheduledJobWatch(api, model, namespaces, scheduledjobs_listed)
    watches = (scheduledjob_watch, job_watch, *run_watch.watches)

    async def listed() -> None:
        """A new leader decides once ScheduledJobs, Jobs and Runs are listed (Forbid counts
        either kind of run)."""
        await scheduledjobs_listed.wait()
        await jobs_listed.wait()
        await run_watch.listed.wait()
        everything_listed.set()

    metrics.dead_letters.set_function(lambda: model.dead_letter_count)
    metrics.scheduledjobs.set_function(lambda: model.scheduledjob_count)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, model)
    tasks: list[asyncio.Task[None]] = []

    async def hand_over() -> None:
        """Stop acting first, then give the Lease up so a standby takes over at once (the
        elector stops itself inside release(), after any Lease write in flight)."""
        tasks[0].cancel()  # the scheduler's loop: nothing new starts
        tasks[1].cancel()  # and the supervisor's
        await scheduler.finish(SHUTDOWN_GRACE)
        await supervisor.finish(SHUTDOWN_GRACE)
        await leadership.release()
        for task in tasks:
            task.cancel()

    @kopf.on.login(registry=registry)
    def login_as_our_client(**_: Any) -> kopf.ConnectionInfo:
        """The same credentials as our own client: in-cluster ServiceAccount, else kubeconfig."""
        return login()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # we post our own Events, with our reasons
        settings.scanning.disabled = True  # no cluster-wide CRD/namespace listing needed
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.watching.chunk_size = LIST_PAGE  # a page at a time, as our own listings
        # A per-object worker holds its last event until it exits; with the default 5 s a large
        # listing kept them all alive at once (events for one RunRequest are rare).
        settings.queueing.idle_timeout = 0.5
        settings.networking.error_backoffs = [0.5, 1, 2, 5, 10]  # kopf's own: its watches' retries
        settings.persistence.diffbase_storage = NoDiffBase()

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        """kopf runs this first when SIGTERM or SIGINT arrives."""
        await hand_over()

    host, port = args.metrics_bind.rsplit(":", 1)
    metricseries.initialise(version())
    prometheus_client.start_http_server(int(port), addr=host)
    checks = health.HealthChecks(
        liveness=lambda: _first(watch.stuck(WATCH_STUCK_AFTER) for watch in watches),
        readiness=lambda: _first(watch.unsynced(WATCH_UNSYNCED_AFTER) for watch in watches),
    )
    health_server = await health.serve(args.health_bind, checks)
    log.info(
        "cronlease %s starting; version %s; namespaces: %s",
        identity,
        version(),
        ", ".join(namespaces) or "all",
    )
    tasks.append(asyncio.create_task(scheduler.run(), name="scheduler"))
    tasks.append(asyncio.create_task(supervisor.run(), name="supervisor"))
    tasks.append(asyncio.create_task(job_watch.run(), name="jobs"))
    tasks.append(asyncio.create_task(scheduledjob_watch.run(), name="scheduledjobs"))
    tasks.append(asyncio.create_task(run_watch.run(), name="runs"))
    tasks.append(asyncio.create_task(listed(), name="listed"))
    tasks.append(asyncio.create_task(leadership.run(), name="election"))
    tasks.append(asyncio.create_task(heaptrim.run(), name="heap trim"))
    for task in tasks:
        task.add_done_callback(_exit_if_failed)
    try:
        await kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
        )
    finally:
        await hand_over()  # a no-op if the cleanup handler did it
        await health_server.cleanup()
        await api.close()


async def refuse_if_fenced(api: KubeApi, namespace: str, leadership: Leadership) -> None:
    """Without an election every write carries token 0 and no Lease holder's name: with the
    fencing policy installed the API server refuses them all. Say so and stop."""
    refusal = await fencing_refusal(api, namespace, leadership.identity, leadership.token)
    if refusal is None:
        return
    print(
        "cronlease: --no-leader-election, but the fencing policy is installed and refuses every "
        f"write without the Lease (in namespace {namespace}: {refusal}). Run with leader "
        "election, or install the chart with fencing.enabled=false.",
        file=sys.stderr,
    )
    await api.close()
    sys.exit(EXIT_CONFIG)


def _first(reasons: Iterable[str | None]) -> str | None:
    return next((reason for reason in reasons if reason), None)


def _count_result(leadership: Leadership, job: dict[str, Any]) -> None:
    """Counted by the leader only: every replica's model sees each Job finish, so a sum over
    replicas counts each Job once (one that finishes while no replica leads, in a failover's
    seconds, is not counted; a counter on every replica would count it once per replica)."""
    if not leadership.is_leading():
        return
    info = job_info(job)
    # A label value from a Job's annotation only when trusted: one of four known triggers.
    trigger = info.trigger if info.trusted else metricseries.UNTRUSTED_TRIGGER
    metrics.job_results.labels(info.state.value, trigger).inc()


def _exit_if_failed(task: asyncio.Task[None]) -> None:
    """The scheduler, the watches and the elector never return on their own (the listing's
    waiter and the heap trim may, harmlessly): if one of them dies, so
    does the process, so that Kubernetes restarts it, rather than leave a replica that watches
    and never acts (or acts on a model that no longer sees its Jobs)."""
    if task.cancelled() or task.exception() is None:
        return
    log.critical("%s died", task.get_name(), exc_info=task.exception())
    os._exit(70)  # EX_SOFTWARE


if __name__ == "__main__":
    main()
