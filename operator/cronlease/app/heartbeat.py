"""`cronlease heartbeat`: renews a multi-step run's heartbeat Lease for its step's pod (issue 17).

Run it as a native sidecar of the step's pod (an init container with `restartPolicy: Always`,
from the operator's own image): it renews the Lease named in CRONLEASE_HEARTBEAT_LEASE, in the
pod's namespace, a few times per lease duration, for as long as the pod runs. The supervisor
restarts the step when the renewals stop (the pod hung, its node is gone). A refusal (403: the
heartbeat policy says this pod is not the Lease's attempt) stops the renewals for good: a
sidecar that exited would only be restarted by the kubelet. A Lease that is gone (404) is waited
for: the operator creates it right after the Job (the pod may start first), and makes it again
if someone deletes it; an abandoned attempt's pod is deleted with its Job.

SIGTERM (the kubelet's, once the pod's main containers have exited, or when the pod is deleted)
ends it at once, after one last renewal: the Job then ends within moments of its main container
(as process 1 of its container, without a handler, the signal would be ignored and the pod
would wait out its grace period, issue 37), and the supervisor gives the Job controller a whole
heartbeat timeout, counted from the pod's end, to record the attempt's result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cronlease.core.names.naming import micro_time
from cronlease.shell.kube import LEASES, ApiError, KubeApi, TransportError, connect, resource_path

log = logging.getLogger("cronlease.app.heartbeat")

NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
RENEWALS_PER_DURATION = 3
MIN_INTERVAL = 1.0


class Stopped(Exception):
    """This attempt may renew no more (refused, or its Lease is gone)."""


async def renew(api: KubeApi, namespace: str, name: str, now: datetime) -> float:
    """One renewal; the seconds until the next. Stopped when it can never succeed again:
    refused. A Lease that is gone is no reason to stop (deleting it must not kill a healthy
    attempt, issue 33): the operator makes it again."""
    path = resource_path(LEASES, namespace, name)
    patch = {"spec": {"renewTime": micro_time(now)}}
    try:
        lease = await api.transport.request(
            "PATCH", path, patch, content_type="application/merge-patch+json"
        )
    except ApiError as error:
        if error.status == 403:
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
    stop: asyncio.Event | None = None,
) -> str:
    """Renew until refused or `stop` is set; why it stopped. Transient failures are retried at
    the next turn. A stop renews once more (best effort), so that the heartbeat counts from the
    pod's end, not from the renewal before it."""
    stop = stop or asyncio.Event()
    while True:
        try:
            wait = await renew(api, namespace, name, clock())
        except Stopped as stopped:
            return str(stopped)
        except (ApiError, TransportError) as error:
            log.warning("renewing Lease %s/%s failed: %s", namespace, name, error)
            wait = MIN_INTERVAL
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval or wait)
        if stop.is_set():
            with contextlib.suppress(Stopped, ApiError, TransportError):
                await renew(api, namespace, name, clock())
            return "the pod is ending (SIGTERM)"


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
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        api = connect(2)
        try:
            why = await renew_forever(
                api, args.namespace, args.lease, interval=args.interval, stop=stop
            )
        finally:
            await api.close()
        log.info("not renewing any more: %s", why)
        await stop.wait()  # a sidecar that exits is restarted: idle until the pod ends

    asyncio.run(run())
