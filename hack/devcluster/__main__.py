"""Command line: python -m devcluster {up,down,status,env,install,sa-kubeconfig}."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcluster.cluster import Cluster, ClusterError, cluster_dir, ensure_cluster, stop_cluster
from devcluster.install import install_chart, service_account_kubeconfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devcluster", description=__doc__)
    parser.add_argument(
        "command", choices=["up", "down", "status", "env", "install", "sa-kubeconfig"]
    )
    parser.add_argument("path", nargs="?", help="sa-kubeconfig: where to write it")
    args = parser.parse_args(argv)
    kubeconfig = cluster_dir() / "kubeconfig"
    try:
        if args.command == "up":
            cluster = ensure_cluster()
            print(f"export KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            print("cluster stopped" if stop_cluster() else "no cluster was running")
        elif args.command == "status":
            return _status()
        elif args.command == "install":
            install_chart(kubeconfig)
            print("installed the cronlease chart (CRD, RBAC, fencing policy; no pods)")
        elif args.command == "sa-kubeconfig":
            target = Path(args.path or cluster_dir() / "operator.kubeconfig")
            print(service_account_kubeconfig(kubeconfig, target))
        else:
            print(f"export KUBECONFIG={cluster_dir() / 'kubeconfig'}")
    except (ClusterError, RuntimeError) as error:
        print(f"devcluster: {error}", file=sys.stderr)
        return 1
    return 0


def _status() -> int:
    cluster = Cluster.load(cluster_dir())
    if cluster is None:
        print("no cluster")
        return 1
    dead = cluster.dead_components()
    for name, pid in cluster.pids.items():
        print(f"{name:26} pid {pid:<8} {'DOWN' if name in dead else 'running'}")
    print(f"server {cluster.server}; kubeconfig {cluster.kubeconfig}; logs {cluster.log_dir}")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
