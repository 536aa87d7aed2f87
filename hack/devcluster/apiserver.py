"""kube-apiserver on 127.0.0.1, serving TLS from the cluster's CA, authorising with RBAC."""

from __future__ import annotations

from pathlib import Path

from devcluster.pki import KeyPair
from devcluster.processes import Started, start_component

NAME = "kube-apiserver"
SERVICE_CIDR = "10.0.0.0/24"
# The kubernetes Service's cluster IP (the range's first address): pods on the real node reach
# the API there (KUBERNETES_SERVICE_HOST), so the serving certificate names it too.
SERVICE_IP = "10.0.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"


def start(
    bins: Path,
    data_dir: Path,
    log_dir: Path,
    *,
    etcd_url: str,
    port: int,
    serving: KeyPair,
    client_ca: Path,
    service_account: KeyPair,
    kubelet_client: KeyPair,
) -> Started:
    """Start the API server against `etcd_url`; the URL is the server for kubeconfigs."""
    command = [
        str(bins / NAME),
        f"--etcd-servers={etcd_url}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={data_dir / 'apiserver'}",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        f"--client-ca-file={client_ca}",
        f"--service-account-key-file={service_account.cert}",
        f"--service-account-signing-key-file={service_account.key}",
        f"--service-account-issuer={ISSUER}",
        f"--api-audiences={ISSUER}",
        # Node: a real node's kubelet (system:node:<name>) gets what it needs for its own pods.
        "--authorization-mode=Node,RBAC",
        # How the API reaches a real node's kubelet (kubectl logs, exec): the kubelet trusts the
        # cluster's CA; it serves a certificate of its own, not checked on this throwaway node.
        f"--kubelet-client-certificate={kubelet_client.cert}",
        f"--kubelet-client-key={kubelet_client.key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        # /debug/pprof, for cluster admins only: bench/bench.py --profile takes CPU profiles
        # during bursts (issue 19).
        "--profiling=true",
        # The real node has no name a resolver knows: reach its kubelet by its address.
        "--kubelet-preferred-address-types=InternalIP",
        # Loopback cannot be advertised in the kubernetes Service's endpoints: pods on the real
        # node reach the API through a forward of the Service's IP (devcluster/node.py).
        "--endpoint-reconciler-type=none",
    ]
    return start_component(NAME, command, log_dir, f"https://127.0.0.1:{port}")
