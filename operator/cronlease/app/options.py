"""The command line: cronlease's own flags, the names controller-runtime operators use for the
same things (so a platform team's habits and manifests carry over), and logging setup."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

import kopf

from cronlease.core.names.distribution import version
from cronlease.shell import logfields
from cronlease.shell.leadership import ElectionConfig

# kopf takes a format string where it takes a LogFormat (its own text formats differ from ours).
LOG_FORMATS: dict[str, Any] = {
    "text": "%(asctime)s %(levelname)s %(name)s: %(message)s",
    "json": kopf.LogFormat.JSON,
}


def go_bool(text: str) -> bool:
    """A Go flag's boolean value: `--leader-elect=false` must work as it does for Go operators."""
    value = text.strip().lower()
    if value in {"1", "t", "true"}:
        return True
    if value in {"0", "f", "false"}:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r} (true or false)")


def bind_address(text: str) -> str:
    """host:port, checked at start rather than when the server binds (a clear error, naming
    the flag). `:8080` means every interface, as in Go."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"not host:port: {text!r}")
    return f"{host or '0.0.0.0'}:{port}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="cronlease",
        description="Run the cronlease operator: Jobs on a schedule, exactly once, fenced.",
    )
    parser.add_argument("--version", action="version", version=f"cronlease {version()}")
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
    parser.add_argument(
        "--metrics-bind",
        "--metrics-bind-address",
        type=bind_address,
        default="0.0.0.0:8080",
        help="host:port for /metrics",
    )
    parser.add_argument(
        "--liveness-bind",
        "--health-probe-bind-address",
        dest="health_bind",
        type=bind_address,
        default="0.0.0.0:8081",
        help="host:port for /healthz (liveness) and /readyz (readiness)",
    )
    parser.add_argument(
        "--max-concurrency", type=int, default=64, help="ScheduledJobs reconciled at once"
    )
    parser.add_argument(
        "--log-format",
        choices=sorted(LOG_FORMATS),
        default="text",
        help="text, or json: one object a line (ts, level, logger, msg, namespace, name...)",
    )
    parser.add_argument("--verbose", "-v", action="store_true")
    election = parser.add_argument_group("leader election")
    election.add_argument(
        "--leader-election",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="elect one active replica through a Lease (default: on)",
    )
    election.add_argument(
        "--leader-elect",
        dest="leader_election",
        type=go_bool,
        nargs="?",
        const=True,
        metavar="BOOL",
        help="controller-runtime's name for --leader-election (--leader-elect=false turns it off)",
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
    return parser.parse_args(argv)


def configure_logging(log_format: str, verbose: bool) -> None:
    """kopf's own handler, so kopf's records and ours come out of one handler in one format; in
    JSON with controller-runtime's field names and the fields of the object each record is about
    (cronlease.shell.logfields)."""
    root = logging.getLogger()
    before = set(root.handlers)
    kopf.configure(verbose=verbose, log_format=LOG_FORMATS[log_format])
    if log_format == "json":
        for handler in root.handlers:
            if handler not in before:  # kopf's (it replaced its earlier one); not a test's capture
                logfields.install(handler)
    # kopf logs every handled event at INFO; at thousands of Jobs a minute that drowns the rest.
    logging.getLogger("kopf.objects").setLevel(logging.DEBUG if verbose else logging.WARNING)
