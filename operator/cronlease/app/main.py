"""`cronlease`: run the operator, or `cronlease heartbeat`, a step pod's sidecar.

The operator is built by the composition root (cronlease.app.wiring) and run under kopf, which
logs in, handles the signals and runs the cleanup (standalone: kopf's peering is not leader
election and has no fence). kopf watches nothing: every collection is on our own watches.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import Any

import kopf

from cronlease.app.options import configure_logging, parse_args
from cronlease.app.wiring import Operator
from cronlease.shell.fenceprobe import fencing_refusal
from cronlease.shell.kube import KubeApi, login
from cronlease.shell.leadership import Leadership

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


# The exit status when the configuration cannot work (EX_CONFIG).
EXIT_CONFIG = 78


async def run(args: argparse.Namespace) -> None:
    """The operator (app.wiring) under kopf: kopf logs in, handles the signals and runs the cleanup;
    it watches nothing (every collection is on our own watches, decision 0002; design note 120)."""
    operator = Operator(args)
    if not args.leader_election:
        # A watched namespace is within the policy's scope; all are when all are watched.
        namespace = (*operator.namespaces, args.lease_namespace)[0]
        await refuse_if_fenced(operator.api, namespace, operator.leadership)
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login_as_our_client(**_: Any) -> kopf.ConnectionInfo:
        """The same credentials as our own client: in-cluster ServiceAccount, else kubeconfig."""
        return login()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # we post our own Events, with our reasons
        settings.scanning.disabled = True  # no cluster-wide CRD/namespace listing needed

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        """kopf runs this first when SIGTERM or SIGINT arrives."""
        await operator.stop()

    try:
        await operator.start()
        await kopf.operator(
            registry=registry,
            standalone=True,  # kopf's peering is no leader election, and has no fence
            clusterwide=not operator.namespaces,
            namespaces=operator.namespaces,
        )
    finally:
        await operator.stop()  # a no-op if the cleanup handler did it


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


if __name__ == "__main__":
    main()
