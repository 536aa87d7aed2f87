"""kube-controller-manager and kube-scheduler, each with its own client certificate.

Their certificates' subjects are the users Kubernetes' built-in RBAC bindings expect, so neither
needs any extra role.
"""

from __future__ import annotations

import os
from pathlib import Path

from devcluster.kubeconfig import write_kubeconfig
from devcluster.pki import CertificateAuthority, KeyPair
from devcluster.processes import Started, start_component

CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
# kube-controller-manager's client rate, for every controller in it (the job controller and the
# CronJob controller among them). Unset: its own default, 20 requests a second in bursts of 30,
# at which the job controller falls behind a burst of thousands of Jobs. `CRONLEASE_KCM_QPS=300
# devcluster up` sizes it as a control plane meant for such bursts would be; the cluster's
# state file records the command line, and the bench reports it.
KCM_QPS = "CRONLEASE_KCM_QPS"


def start_controller_manager(
    bins: Path,
    data_dir: Path,
    log_dir: Path,
    *,
    server: str,
    ca: CertificateAuthority,
    service_account: KeyPair,
    port: int,
) -> Started:
    """Start every default controller against `server`; the URL is its health endpoint."""
    kubeconfig = data_dir / f"{CONTROLLER_MANAGER}.kubeconfig"
    write_kubeconfig(kubeconfig, server, ca.pair, ca.issue("kcm", f"system:{CONTROLLER_MANAGER}"))
    command = [
        str(bins / CONTROLLER_MANAGER),
        *_client_flags(kubeconfig, port),
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={service_account.key}",
        f"--root-ca-file={ca.pair.cert}",
        f"--cluster-signing-cert-file={ca.pair.cert}",
        f"--cluster-signing-key-file={ca.pair.key}",
        # All default controllers: job, cronjob (our rival), garbage collector,
        # service accounts and tokens, namespace, TTL-after-finished, node lifecycle.
        "--controllers=*",
        *rate_flags(os.environ.get(KCM_QPS, "")),
    ]
    return start_component(CONTROLLER_MANAGER, command, log_dir, _healthz(port))


def start_scheduler(
    bins: Path, data_dir: Path, log_dir: Path, *, server: str, ca: CertificateAuthority, port: int
) -> Started:
    """Start the scheduler against `server`; the URL is its health endpoint."""
    kubeconfig = data_dir / f"{SCHEDULER}.kubeconfig"
    write_kubeconfig(kubeconfig, server, ca.pair, ca.issue("scheduler", f"system:{SCHEDULER}"))
    command = [str(bins / SCHEDULER), *_client_flags(kubeconfig, port)]
    return start_component(SCHEDULER, command, log_dir, _healthz(port))


def rate_flags(qps: str) -> list[str]:
    if not qps:
        return []
    if not qps.isdigit() or int(qps) < 1:
        raise ValueError(f"{KCM_QPS} must be a positive whole number of requests a second: {qps!r}")
    return [f"--kube-api-qps={qps}", f"--kube-api-burst={int(qps) * 3 // 2}"]


def _client_flags(kubeconfig: Path, port: int) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        # One instance of each: there is nobody to elect.
        "--leader-elect=false",
    ]


def _healthz(port: int) -> str:
    return f"https://127.0.0.1:{port}/healthz"
