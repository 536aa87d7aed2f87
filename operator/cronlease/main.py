"""`cronlease`: run the operator.

kopf runs the watches (standalone: kopf's peering is not leader election and has no fencing);
our scheduler loop runs beside it on the same event loop and is the only thing that writes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import kopf
import prometheus_client

from cronlease import handlers
from cronlease.kube import KubeApi, load_config
from cronlease.leadership import SoleLeader
from cronlease.scheduler import Scheduler

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


async def run(args: argparse.Namespace) -> None:
    identity = f"{args.identity}-{uuid.uuid4().hex[:6]}"
    api = KubeApi(await load_config(args.max_concurrency))
    namespaces = tuple(args.namespace)
    scheduler = Scheduler(api, SoleLeader(identity), namespaces, args.max_concurrency)
    registry = kopf.OperatorRegistry()
    handlers.register(registry, scheduler)

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """The same credentials as our own client: in-cluster ServiceAccount, else kubeconfig."""
        return await kopf.login_via_async_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # we post our own Events, with our reasons
        settings.scanning.disabled = True  # no cluster-wide CRD/namespace listing needed
        settings.watching.server_timeout = 300
        settings.watching.client_timeout = 330
        settings.networking.error_backoffs = [0.5, 1, 2, 5, 10]

    host, port = args.metrics_bind.rsplit(":", 1)
    prometheus_client.start_http_server(int(port), addr=host)
    log.info("cronlease %s starting; namespaces: %s", identity, ", ".join(namespaces) or "all")
    loop_task = asyncio.create_task(scheduler.run(), name="scheduler")
    try:
        await kopf.operator(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=f"http://{args.liveness_bind}/healthz",
        )
    finally:
        loop_task.cancel()
        await api.close()


if __name__ == "__main__":
    main()
