"""`cronlease`: run the operator.

kopf watches ScheduledJobs (standalone: kopf's peering is not leader election and has no
fencing), cronlease.jobwatch their Jobs; our scheduler loop runs beside them on the same event
loop and is the only thing that writes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any, cast

import kopf
import prometheus_client

from cronlease import handlers, metrics
from cronlease.jobinfo import job_info
from cronlease.jobwatch import JobWatch
from cronlease.kube import LIST_PAGE, KubeApi, connect, login
from cronlease.leadership import ElectionConfig, Leadership, LeaseElector, SoleLeader
from cronlease.model import Key, Model
from cronlease.scheduler import Scheduler
from cronlease.servertime import ServerClock
from cronlease.wakeups import WakeupQueue

log = logging.getLogger("cronlease")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cronlease", description=__doc__)
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or socket.gethostname(),
        help="this replica's name; a random suffix is added (default: $POD_NAME or the hostname)",
    )
    parser.add_argument("--metrics-bind", default="0.0.0.0:8080", help="host:port for /metrics")
    parser.add_argument(
        "--liveness-bind", default="0.0.0.0:8081", help="host:port for kopf's /healthz"
    )
    parser.add_argument(
        "--max-concurrency", type=int, default=64, help="ScheduledJobs reconciled at once"
    )
    election = parser.add_argument_group("leader election")
    election.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect one active replica through a Lease (default: on)",
    )
    election.add_argument("--lease-name", default="cronlease-leader")
    election.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "default"),
        help="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    timings = ElectionConfig(namespace="")  # the defaults, defined once
    election.add_argument(
        "--lease-duration", type=float, default=timings.lease_duration, help="seconds"
    )
    election.add_argument(
        "--renew-deadline", type=float, default=timings.renew_deadline, help="seconds"
    )
    election.add_argument(
        "--retry-period", type=float, default=timings.retry_period, help="seconds"
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # kopf logs every handled event at INFO; at thousands of Jobs a minute that drowns the rest.
    logging.getLogger("kopf.objects").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
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


def leadership_from(args: argparse.Namespace, api: KubeApi, identity: str) -> Leadership:
    if not args.leader_election:
        return SoleLeader(identity)
    config = ElectionConfig(
        namespace=args.lease_namespace,
        lease_name=args.lease_name,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    return LeaseElector(api, identity, config)


# A Job watch failing this long without a success makes the health endpoint fail: readiness
# shows it, and after the liveness probe's failures the pod restarts with a fresh watch.
WATCH_STUCK_AFTER = 60.0
# How long a graceful stop lets the reconciles in flight finish (their status writes, and the
# finalizers those release) before the Lease is given up; well within the pod's grace period.
SHUTDOWN_GRACE = 5.0


async def run(args: argparse.Namespace) -> None:
    identity = f"{args.identity}-{uuid.uuid4().hex[:6]}"
    server_clock = ServerClock()
    api = connect(args.max_concurrency, server_clock.observe)
    namespaces = tuple(args.namespace)
    # The Lease gets its own connections: a renewal must never queue behind a burst of our own
    # Job creations and status writes for a free one (docs/design-notes.md, item 11).
    lease_api = connect(4, server_clock.observe)
    leadership = leadership_from(args, lease_api, identity)
    # Wake-ups on the same clock as decisions: with the host ahead, a slot's wake-up would
    # otherwise come early, find the slot not yet due, and ask to be woken at once, again.
    wakeups: WakeupQueue[Key] = WakeupQueue(clock=lambda: server_clock.now().timestamp())
    model = Model(wakeups.changed, on_job_finished=_count_result, on_job_change=wakeups.notify)
    jobs_listed = asyncio.Event()
    scheduler = Scheduler(
        api,
        leadership,
        model,
        wakeups,
        jobs_listed,
        namespaces,
        args.max_concurrency,
        clock=server_clock.now,  # "now" never runs ahead of the API server's clock
    )
    job_watch = JobWatch(api, model, namespaces, jobs_listed)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, model)
    tasks: list[asyncio.Task[None]] = []

    async def hand_over() -> None:
        """Stop acting first, then give the Lease up so a standby takes over at once (the
        elector stops itself inside release(), after any Lease write in flight)."""
        tasks[0].cancel()  # the scheduler's loop: nothing new starts
        await scheduler.finish(SHUTDOWN_GRACE)
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
        # listing kept them all alive at once (events for one ScheduledJob are rare).
        settings.queueing.idle_timeout = 0.5
        settings.networking.error_backoffs = [0.5, 1, 2, 5, 10]  # kopf's own: its watches' retries
        settings.persistence.diffbase_storage = NoDiffBase()

    @kopf.on.probe(id="jobWatch", registry=registry)
    def job_watch_is_current(**_: Any) -> str:
        """The liveness and readiness endpoint fails while the Job watch is stuck."""
        problem = job_watch.stuck(WATCH_STUCK_AFTER)
        if problem:
            raise kopf.PermanentError(problem)
        return "current"

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        """kopf runs this first when SIGTERM or SIGINT arrives."""
        await hand_over()

    host, port = args.metrics_bind.rsplit(":", 1)
    prometheus_client.start_http_server(int(port), addr=host)
    log.info("cronlease %s starting; namespaces: %s", identity, ", ".join(namespaces) or "all")
    tasks.append(asyncio.create_task(scheduler.run(), name="scheduler"))
    tasks.append(asyncio.create_task(job_watch.run(), name="jobs"))
    tasks.append(asyncio.create_task(leadership.run(), name="election"))
    for task in tasks:
        task.add_done_callback(_exit_if_failed)
    try:
        await kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=f"http://{args.liveness_bind}/healthz",
        )
    finally:
        await hand_over()  # a no-op if the cleanup handler did it
        await api.close()
        await lease_api.close()


def _count_result(job: dict[str, Any]) -> None:
    metrics.job_results.labels(job_info(job).state.value).inc()


def _exit_if_failed(task: asyncio.Task[None]) -> None:
    """The scheduler, the Job watch and the elector never return on their own: if one dies, so
    does the process, so that Kubernetes restarts it, rather than leave a replica that watches
    and never acts (or acts on a model that no longer sees its Jobs)."""
    if task.cancelled() or task.exception() is None:
        return
    log.critical("%s died", task.get_name(), exc_info=task.exception())
    os._exit(70)  # EX_SOFTWARE


if __name__ == "__main__":
    main()
