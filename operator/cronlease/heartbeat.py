"""`cronlease heartbeat`: renews a multi-step run's heartbeat Lease for its step's pod (issue 17).

Run it as a native sidecar of the step's pod (an init container with `restartPolicy: Always`,
from the operator's own image): it renews the Lease named in CRONLEASE_HEARTBEAT_LEASE, in the
pod's namespace, a few times per lease duration, for as long as the pod runs. The supervisor
restarts the step when the renewals stop (the pod hung, its node is gone). A refusal (403: the
fencing policy says this pod is not the Lease's attempt) or a Lease that is gone (404: the
attempt was abandoned) stops the renewals for good: this attempt is no longer the current one,
and a sidecar that exited would only be restarted by the kubelet.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cronlease.kube import LEASES, ApiError, KubeApi, TransportError, connect, resource_path
from cronlease.naming import micro_time

log = logging.getLogger("cronlease.heartbeat")

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
RENEWALS_PER_DURATION = 3
MIN_INTERVAL = 1.0


class Stopped(Exception):
    """This attempt may renew no more (refused, or its Lease is gone)."""


async def renew(
    api: KubeApi, namespace: str, name: str, now: datetime, renewed_before: bool = True
) -> float:
    """One renewal; the seconds until the next. Stopped when it can never succeed again: refused,
    or its Lease gone after it was renewed (before, it may just not be made yet: the operator
    creates it right after the Job, and a failover can delay that)."""
    path = resource_path(LEASES, namespace, name)
    patch = {"spec": {"renewTime": micro_time(now)}}
    try:
        lease = await api.transport.request(
            "PATCH", path, patch, content_type="application/merge-patch+json"
        )
    except ApiError as error:
        if error.status == 403 or (error.status == 404 and renewed_before):
            raise Stopped(f"renewing Lease {namespace}/{name}: {error.message}") from error
        raise
    duration = (lease.get("spec") or {}).get("leaseDurationSeconds") or 30
    return max(MIN_INTERVAL, float(duration) / RENEWALS_PER_DURATION)


async def renew_forever(
    api: KubeApi,
    namespace: str,
    name: str,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    interval: float | None = None,
) -> str:
    """Renew until stopped; why it stopped. Transient failures are retried at the next turn."""
    renewed = False
    while True:
        try:
            wait = await renew(api, namespace, name, clock(), renewed)
            renewed = True
        except Stopped as stopped:
            return str(stopped)
        except (ApiError, TransportError) as error:
            log.warning("renewing Lease %s/%s failed: %s", namespace, name, error)
            wait = MIN_INTERVAL
        await asyncio.sleep(interval or wait)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cronlease heartbeat",
        description="Renew a multi-step run's heartbeat Lease while this pod runs.",
    )
    parser.add_argument(
        "--lease",
        default=os.environ.get("CRONLEASE_HEARTBEAT_LEASE", ""),
        help="the Lease to renew (default: $CRONLEASE_HEARTBEAT_LEASE)",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        default=os.environ.get("POD_NAMESPACE", ""),
        help="its namespace (default: $POD_NAMESPACE, else the pod's ServiceAccount namespace)",
    )
    parser.add_argument(
        "--interval", type=float, help="seconds between renewals (default: a third of its duration)"
    )
    args = parser.parse_args(argv)
    if not args.namespace and NAMESPACE_FILE.exists():
        args.namespace = NAMESPACE_FILE.read_text().strip()
    if not args.lease or not args.namespace:
        parser.error("no Lease to renew: set --lease and --namespace (or run in a step's pod)")
    return args


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    async def run() -> None:
        api = connect(2)
        try:
            why = await renew_forever(api, args.namespace, args.lease, interval=args.interval)
        finally:
            await api.close()
        log.info("not renewing any more: %s", why)
        await asyncio.Event().wait()  # a sidecar that exits is restarted: idle until the pod ends

    asyncio.run(run())
