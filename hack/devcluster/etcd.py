"""etcd for one throwaway cluster: plain HTTP on loopback, one member."""

from __future__ import annotations

from pathlib import Path

from devcluster.processes import Started, start_component

NAME = "etcd"


def start(bins: Path, data_dir: Path, log_dir: Path, client_port: int, peer_port: int) -> Started:
    """Start etcd with its data under `data_dir/etcd`; the URL is its client endpoint."""
    url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    command = [
        str(bins / NAME),
        "--name=default",
        f"--data-dir={data_dir / 'etcd'}",
        f"--listen-client-urls={url}",
        f"--advertise-client-urls={url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        # A test cluster trades durability for speed: its data dies with it anyway.
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    return start_component(NAME, command, log_dir, url)
