"""kwok: plays one fake node, whose pods run and end as their annotations say (kwok-stages.yaml).

It works against any cluster, ours or kind's; nothing here depends on how the API was started.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devcluster.processes import Started, start_component

NAME = "kwok"
STAGES = Path(__file__).with_name("kwok-stages.yaml")
NODE_NAME = "kwok-node-0"
NODE_SELECTOR_LABEL = ("type", "kwok")
# The taint kwok's documentation gives fake nodes; ours has it while a real node runs beside it.
FAKE_TAINT = "kwok.x-k8s.io/node=fake"


def start(bins: Path, kubeconfig: Path, log_dir: Path, port: int, stages: Path = STAGES) -> Started:
    """Start kwok as the client of `kubeconfig` with the `stages` file (read once, at start); the
    URL is its own server (health, metrics)."""
    command = [
        str(bins / NAME),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{port}",
        "--cidr=10.244.0.0/16",
        "--node-ip=127.0.0.1",
    ]
    return start_component(NAME, command, log_dir, f"http://127.0.0.1:{port}")


def fake_node() -> dict[str, Any]:
    """One fake node, untainted (but while a real node runs: devcluster.cluster.ensure_node),
    labelled type=kwok so test pods can select it on kind too."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                NODE_SELECTOR_LABEL[0]: NODE_SELECTOR_LABEL[1],
            },
        },
    }


def kwok_pod_template(
    duration: str = "0s",
    result: str = "Succeeded",
    *,
    fail_attempts: Sequence[int] = (),
    exit_code: int | None = None,
) -> dict[str, Any]:
    """A Job's pod template for the fake node: kwok runs the pod for `duration`, then ends it as
    `result` says, but Failed if the pod's `cronlease.io/attempt` is in `fail_attempts`; a failed
    pod's containers exit with `exit_code` (default 1). The node selector keeps such pods off
    real kubelets (on kind)."""
    annotations = {"kwok.cronlease.io/duration": duration, "kwok.cronlease.io/result": result}
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in fail_attempts):
        raise ValueError(f"fail_attempts: attempts are integers from 1, got {fail_attempts!r}")
    if fail_attempts:
        annotations["kwok.cronlease.io/fail-attempts"] = ",".join(map(str, fail_attempts))
    if exit_code is not None:
        # 0 is a success, and a pod failure policy cannot select it with In.
        if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 0 < exit_code < 256:
            raise ValueError(f"exit_code: an integer from 1 to 255, got {exit_code!r}")
        annotations["kwok.cronlease.io/exit-code"] = str(exit_code)
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {NODE_SELECTOR_LABEL[0]: NODE_SELECTOR_LABEL[1]},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": "noop"}],
        },
    }
