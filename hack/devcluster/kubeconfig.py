"""Kubeconfig files that authenticate with a client certificate, data inlined."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from devcluster.pki import KeyPair


def write_kubeconfig(path: Path, server: str, ca: KeyPair, client: KeyPair) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cronlease-dev",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": _b64(ca.cert),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": _b64(client.cert),
                    "client-key-data": _b64(client.key),
                },
            }
        ],
        "contexts": [
            {"name": "cronlease-dev", "context": {"cluster": "cronlease-dev", "user": "admin"}}
        ],
        "current-context": "cronlease-dev",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
