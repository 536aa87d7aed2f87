"""kube-controller-manager and kube-scheduler, each with its own client certificate.

Their certificates' subjects are the users Kubernetes' built-in RBAC bindings expect, so neither
needs any extra role.
"""

from __future__ import annotations

from pathlib import Path

from devcluster.kubeconfig import write_kubeconfig
from devcluster.pki import CertificateAuthority, KeyPair
from devcluster.processes import Started, start_component

CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"


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
