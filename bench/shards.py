"""How large a burst one leader, and S shard leaders, keep within a p99 lag of 1 s.

A simulation (hack/shard_model.py) fed with what was measured: each slot's decision time is the
pure core's own (`decide` and building the Job, timed here slot by slot), the rest of the
leader's cost per created Job comes from the bench's burst with the operator on a core of its
own (0.94 ms of CPU in all at N=1000, `--pin`, design note 106; 2.2 ms sharing the machine's
cores before note 105), and the API server's create rate per control-plane core from the raw
creates on this 2-core machine (210 to 680 Jobs/s, bench/results/latest.md and
steps-cost.md), scaled with the cores (an assumption no single machine here can check).
docs/scaling.md reads the result.

    make bench-shards
    python bench/shards.py --cores 2 4 8 32 --shards 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from decide import SLOT, scheduledjob

from bench_results import save_results
from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.reconcile import decide
from percentiles import nearest_rank
from shard_model import Leader, Slot, largest_burst, simulate

RESULTS = Path(__file__).with_name("results")


def decision_times(count: int) -> list[float]:
    """The pure core's time for each of `count` slots due at once: decide + build the Job."""
    views = [scheduledjob(i, "0 * * * *", SLOT - timedelta(hours=1)) for i in range(count)]
    now = SLOT + timedelta(seconds=0.1)
    for sj in views[:50]:  # warm the schedule cache and the imports
        decide(sj, [], now)
    times = []
    for sj in views:
        start = time.perf_counter()
        for run in decide(sj, [], now).runs:
            build_job(sj, run, "bench-leader", 1)
        times.append(time.perf_counter() - start)
    return times


def table(rows: list[dict[str, Any]], shards: list[int], key: str, form: str) -> list[str]:
    """One row per control plane (cores, API server speed), one column per shard count."""
    header = " | ".join(f"S={s}" for s in shards)
    lines = [
        f"| control-plane cores K | API server | Jobs/s | {header} |",
        "|---|---|---|" + "---|" * len(shards),
    ]
    for row in rows:
        cells = " | ".join(form.format(row[key][s]) for s in shards)
        lines.append(f"| {row['cores']} | {row['api']} | {row['rate']:,.0f} | {cells} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job-cost-ms", type=float, default=0.94, help="leader CPU per Job")
    parser.add_argument(
        "--rate-per-core",
        type=float,
        nargs=2,
        default=[105.0, 340.0],
        help="the API server's Job creates per second per core: the slowest and the fastest",
    )
    parser.add_argument("--cores", type=int, nargs="+", default=[2, 4, 8, 32])
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--per-namespace", type=int, default=10, help="ScheduledJobs each")
    parser.add_argument("--sample", type=int, default=2000, help="slots timed for the core")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    times = decision_times(args.sample)
    mean_decide = statistics.fmean(times)
    leader = Leader(overhead=max(0.0, args.job_cost_ms / 1000 - mean_decide))

    def burst(n: int) -> list[Slot]:
        return [Slot(f"ns-{i // args.per_namespace:06d}", times[i % len(times)]) for i in range(n)]

    rows = []
    for cores in args.cores:
        for label, per_core in zip(("slow", "fast"), args.rate_per_core, strict=True):
            rate = per_core * cores
            found = {s: largest_burst(burst, s, leader, rate) for s in args.shards}
            p99_10k = {
                s: nearest_rank(simulate(burst(10_000), s, leader, rate), 0.99) for s in args.shards
            }
            rows.append(
                {"cores": cores, "api": label, "rate": rate, "largest": found, "p99_10k": p99_10k}
            )
    record = {
        "job_cost_ms": args.job_cost_ms,
        "decide_ms": {"mean": mean_decide * 1000, "p99": nearest_rank(times, 0.99) * 1000},
        "overhead_ms": leader.overhead * 1000,
        "in_flight": leader.in_flight,
        "rate_per_core": args.rate_per_core,
        "per_namespace": args.per_namespace,
        "rows": rows,
    }
    shards = args.shards
    lines = [
        "# Bursts through S shard leaders: the largest N due at once with p99 <= 1 s",
        "",
        "`python bench/shards.py` (hack/shard_model.py; docs/scaling.md reads it). Each leader "
        f"on its own core: the pure core's time per slot, measured here (mean "
        f"{mean_decide * 1e6:.0f} µs, p99 {nearest_rank(times, 0.99) * 1e6:.0f} µs), plus "
        f"{leader.overhead * 1000:.2f} ms, the rest of the {args.job_cost_ms} ms of CPU per "
        f"created Job measured in the bench's burst with a core of its own (`--pin`); "
        f"{leader.in_flight} creates in flight. The "
        "API server creates Jobs first come, first served at the rate per control-plane core "
        f"measured on this machine ({args.rate_per_core[0]:.0f} to "
        f"{args.rate_per_core[1]:.0f} a core), times K. {args.per_namespace} ScheduledJobs a "
        "namespace; namespaces go to shards by hash.",
        "",
    ]
    lines += table(rows, shards, "largest", "{:,}")
    lines += ["", "p99 lag, seconds, of 10,000 slots due at once:", ""]
    lines += table(rows, shards, "p99_10k", "{:.2f}")
    text = "\n".join(lines) + "\n"
    save_results(args.out, "shards", text, record)
    print(text)


if __name__ == "__main__":
    main()
