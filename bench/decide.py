"""The pure decision path, timed on one core: `decide` plus building the Job, per slot.

Issue 19 asks the part of the burst the operator owns to keep up with 10,000 slots a second on
one core, whatever the API server can take, and a day of missed per-second slots to be caught up
(counted and recorded) within 50 ms. No cluster, no I/O: ScheduledJobs as the model holds them,
each with one slot due, decided at an instant just after it, and the Job of each planned run
built as the applier would send it. Several rounds; the best and the median are reported.

    make bench-decide
    python bench/decide.py --scheduledjobs 5000 --rounds 5
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench_results import save_results
from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.naming import format_time

RESULTS = Path(__file__).with_name("results")
SLOT = datetime(2026, 12, 1, 10, tzinfo=UTC)  # every ScheduledJob's slot: a burst
TARGETS = {"slots_per_second": 10_000, "catch_up_day_ms": 50}


def template() -> dict[str, Any]:
    return {
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
        }
    }


def scheduledjob(index: int, schedule: str, processed: datetime, **spec: Any) -> ScheduledJobView:
    raw = {"schedule": schedule, "jobTemplate": template(), **spec}
    key = f"schedule={schedule};timeZone=UTC"
    return ScheduledJobView(
        name=f"sj-{index:05d}",
        namespace="bench",
        uid=f"uid-{index:05d}",
        generation=1,
        created_at=processed - timedelta(days=30),
        spec=raw,
        status={"observedSchedule": key, "processedUntil": format_time(processed)},
        annotations={},
    )


def burst_round(views: list[ScheduledJobView], now: datetime) -> tuple[float, int]:
    """Seconds to decide every ScheduledJob and build its Jobs; how many Jobs were built."""
    built = 0
    start = time.perf_counter()
    for sj in views:
        decision = decide(sj, [], now)
        for run in decision.runs:
            build_job(sj, run, "bench-leader", 1)
            built += 1
    return time.perf_counter() - start, built


def catch_up_round(index: int) -> tuple[float, int]:
    """Seconds to decide a per-second ScheduledJob a day behind; slots it accounted for. Each
    round is another day, so that no round reuses what the schedule remembers of the last."""
    now = SLOT + timedelta(days=index, seconds=0.1)
    sj = scheduledjob(0, "* * * * * *", now - timedelta(days=1))
    start = time.perf_counter()
    decision = decide(sj, [], now)
    elapsed = time.perf_counter() - start
    return elapsed, len(decision.runs) + sum(skip.count for skip in decision.skips)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheduledjobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    views = [
        scheduledjob(i, "0 * * * *", SLOT - timedelta(hours=1)) for i in range(args.scheduledjobs)
    ]
    now = SLOT + timedelta(seconds=0.1)
    burst_round(views[:50], now)  # warm the schedule cache and the imports
    bursts = [burst_round(views, now) for _ in range(args.rounds)]
    assert all(built == args.scheduledjobs for _, built in bursts), bursts
    rates = [args.scheduledjobs / seconds for seconds, _ in bursts]
    catch_ups = [catch_up_round(index) for index in range(args.rounds)]
    assert all(slots == 86_400 for _, slots in catch_ups), catch_ups
    catch_up_ms = [seconds * 1000 for seconds, _ in catch_ups]
    record = {
        "scheduledjobs": args.scheduledjobs,
        "rounds": args.rounds,
        "python": platform.python_version(),
        "slots_per_second": {"best": max(rates), "median": statistics.median(rates)},
        "catch_up_day_ms": {"best": min(catch_up_ms), "median": statistics.median(catch_up_ms)},
        "targets": TARGETS,
    }
    median_rate = record["slots_per_second"]["median"]
    median_catch_up = record["catch_up_day_ms"]["median"]
    text = "\n".join(
        [
            "# The pure decision path on one core (`python bench/decide.py`)",
            "",
            f"{args.scheduledjobs} ScheduledJobs, each with one slot due, decided and their Jobs "
            f"built, {args.rounds} rounds (Python {record['python']}).",
            "",
            "| figure | median | best | target |",
            "|---|---|---|---|",
            f"| slots per second (decide + build the Job) | {median_rate:,.0f} | "
            f"{max(rates):,.0f} | >= {TARGETS['slots_per_second']:,} |",
            f"| a day of per-second slots caught up, ms | {median_catch_up:.1f} | "
            f"{min(catch_up_ms):.1f} | <= {TARGETS['catch_up_day_ms']} |",
            "",
        ]
    )
    save_results(args.out, "decide", text, record)
    print(text)


if __name__ == "__main__":
    main()
