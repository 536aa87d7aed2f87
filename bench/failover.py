"""Failover times with the production election settings (15 s lease, 10 s renew deadline, 2 s
retry): SIGKILL of the leader (a standby waits out the lease) and SIGTERM (the leader releases
the Lease). Takeover is measured from outside: from the signal to the Lease naming a new holder.

    make failover   # or: python bench/failover.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from pathlib import Path

from devcluster import ensure_cluster
from devcluster.cluster import kubectl
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.replica import (
    LEASE,
    OPERATOR_NAMESPACE,
    PRODUCTION_ELECTION,
    REPO,
    OperatorProcess,
)


def holder(kubeconfig: Path) -> str:
    return kubectl(
        kubeconfig, "get", "lease", LEASE, "-n", OPERATOR_NAMESPACE,
        "-o", "jsonpath={.spec.holderIdentity}", check=False,
    ).strip()  # fmt: skip


def leader(
    replicas: list[OperatorProcess], kubeconfig: Path, timeout: float = 60
) -> OperatorProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = holder(kubeconfig)
        for replica in replicas:
            if replica.running and replica.identity() == current:
                return replica
        time.sleep(0.05)
    raise TimeoutError("no replica took the Lease")


def takeover(replicas: list[OperatorProcess], kubeconfig: Path, sig: signal.Signals) -> float:
    """Signal the leader, time until another replica holds the Lease, restart the signalled one."""
    old = leader(replicas, kubeconfig)
    others = {r.identity() for r in replicas if r is not old}
    start = time.monotonic()
    old.send(sig)
    while holder(kubeconfig) not in others:
        if time.monotonic() - start > 60:
            raise TimeoutError("no takeover within 60 s")
    elapsed = time.monotonic() - start
    old.stop()
    old.start()  # back as a standby for the next round
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    cluster = ensure_cluster()
    install_chart(cluster.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="cronlease-failover-"))
    operator_config = service_account_kubeconfig(cluster.kubeconfig, work / "kubeconfig")
    replicas = [
        OperatorProcess(operator_config, work, f"failover-{i}", PRODUCTION_ELECTION)
        for i in range(2)
    ]
    for replica in replicas:
        replica.start()
    try:
        results = {
            "SIGKILL": [
                takeover(replicas, cluster.kubeconfig, signal.SIGKILL) for _ in range(args.runs)
            ],
            "SIGTERM": [
                takeover(replicas, cluster.kubeconfig, signal.SIGTERM) for _ in range(args.runs)
            ],
        }
    finally:
        for replica in replicas:
            replica.stop()
    lines = [
        "| signal | runs | median s | min s | max s | bound s |",
        "|---|---|---|---|---|---|",
    ]
    bounds = {
        "SIGKILL": PRODUCTION_ELECTION["lease_duration"] + PRODUCTION_ELECTION["retry_period"],
        "SIGTERM": PRODUCTION_ELECTION["retry_period"] + 1,
    }
    for name, times in results.items():
        lines.append(
            f"| {name} | {len(times)} | {statistics.median(times):.2f} | {min(times):.2f} | "
            f"{max(times):.2f} | {bounds[name]:.0f} |"
        )
    table = "\n".join(lines)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "failover.json").write_text(
        json.dumps({"settings": PRODUCTION_ELECTION, "seconds": results}, indent=2)
    )
    (out / "failover.md").write_text(
        "# Failover (production election settings: 15 s lease, 10 s renew deadline, 2 s retry)\n\n"
        f"{table}\n\nMeasured by `make failover` (bench/failover.py): signal to new Lease holder.\n"
    )
    print(table)


if __name__ == "__main__":
    main()
