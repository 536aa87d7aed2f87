"""A real Kubernetes control plane on 127.0.0.1, built from the upstream Go modules.

`devcluster up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (one
fake node whose pods end as their annotations say) and writes a kubeconfig; `devcluster down` stops
them all. Tests use `ensure_cluster()`.
"""

from devcluster.cluster import (
    Cluster,
    ClusterError,
    cluster_dir,
    ensure_cluster,
    start_kwok,
    stop_cluster,
)

__all__ = ["Cluster", "ClusterError", "cluster_dir", "ensure_cluster", "start_kwok", "stop_cluster"]
