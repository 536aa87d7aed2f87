"""Command line: python -m devcluster {up,down,node-up,node-down,status,env,install,sa-kubeconfig}.

node-up starts a real node (containerd, runc, a kubelet) beside kwok's, with the operator's image
imported (made by `make image` if needed); node-down stops it and takes back what it changed on
the host; down stops it too."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from devcluster import image, node
from devcluster.cluster import (
    Cluster,
    ClusterError,
    cluster_dir,
    ensure_cluster,
    ensure_node,
    stop_cluster,
    stop_node,
)
from devcluster.install import install_chart, service_account_kubeconfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devcluster", description=__doc__)
    parser.add_argument(
        "command",
        choices=["up", "down", "node-up", "node-down", "status", "env", "install", "sa-kubeconfig"],
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
        elif args.command == "node-up":
            why = node.unavailable()
            if why:
                raise ClusterError(why)
            ensure_cluster()
            ensure_node([image.build()])
            print(f"node {node.NODE_NAME} is Ready")
        elif args.command == "node-down":
            print("real node stopped" if stop_node() else "no real node was running")
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
    except (ClusterError, RuntimeError) as error:  # NodeError and ImageError among them
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
