"""What the live model keeps per Job, in-process: bytes per Job and where they go.

N ScheduledJobs (in the model, as their watch puts them) with S finished Jobs each, the shape of
`make bench` at N=5000 after its two slots: each Job is the operator's own (built by
`cronlease.core.bodies.jobtemplate.build_job`, with the fields the API server and the Job controller
add), serialised, and parsed again from its own JSON as the Job watch does, then fed to
`Model.upsert_job`. tracemalloc counts what stays allocated once the garbage is collected, by the
line that allocated it.

    make bench-jobrecords
    python bench/jobrecords.py --scheduledjobs 1000 --slots 3
"""

from __future__ import annotations

import argparse
import gc
import platform
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from bench_results import save_results
from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView
from cronlease.core.names.naming import TRIGGER_SCHEDULE, format_time, scheduled_job_name
from cronlease.shell.model import Model

RESULTS = Path(__file__).with_name("results")
NAMESPACE = "bench-records"
SLOT = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
TEMPLATE = {
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            }
        }
    }
}


def scheduledjob(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": f"b{index:05d}",
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(index + 1),
            "generation": 1,
            "creationTimestamp": format_time(SLOT - timedelta(minutes=5)),
        },
        "spec": {"schedule": "* * * * *", "jobTemplate": TEMPLATE},
    }


def finished_job(sj: dict[str, Any], slot: datetime, index: int, version: int) -> bytes:
    """One Job as its last watch event carries it: created at the slot (spread over 8 s, as a
    burst's are), run for 2 s, complete, its slot-record finalizer released."""
    metadata = sj["metadata"]
    view = ScheduledJobView(
        name=metadata["name"],
        namespace=NAMESPACE,
        uid=metadata["uid"],
        generation=1,
        created_at=SLOT,
        spec=sj["spec"],
        status={},
        annotations={},
    )
    name = scheduled_job_name(view.name, slot, False)
    job = build_job(view, PlannedRun(name, slot, TRIGGER_SCHEDULE), "bench-leader", 1)
    created = slot + timedelta(seconds=index * 8 // 5000)
    done = format_time(created + timedelta(seconds=2))
    job["metadata"].update(
        namespace=NAMESPACE,
        uid=str(uuid.uuid4()),
        resourceVersion=str(version),
        creationTimestamp=format_time(created),
        finalizers=[],
    )
    job["status"] = {
        "startTime": format_time(created),
        "completionTime": done,
        "succeeded": 1,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": done}],
    }
    return orjson.dumps(job)


def measure(scheduledjobs: int, slots: int) -> dict[str, Any]:
    model = Model(lambda key: None)
    sjs = [scheduledjob(index) for index in range(scheduledjobs)]
    for sj in sjs:
        model.upsert_scheduledjob(orjson.loads(orjson.dumps(sj)))
    version = scheduledjobs + 1
    events = []
    for slot in (SLOT + timedelta(minutes=m) for m in range(slots)):
        for index, sj in enumerate(sjs):
            version += 1
            events.append(finished_job(sj, slot, index, version))
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for event in events:
        model.upsert_job(orjson.loads(event))
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # The strings a Job keeps are the parser's: they count at this file's orjson.loads line.
    sites = [
        {
            "line": f"{Path(stat.traceback[0].filename).name}:{stat.traceback[0].lineno}",
            "bytes": stat.size,
            "objects": stat.count,
        }
        for stat in snapshot.statistics("lineno")
        if Path(stat.traceback[0].filename).name != "tracemalloc.py"
    ][:8]
    return {
        "scheduledjobs": scheduledjobs,
        "jobs": len(events),
        "bytes_kept": kept,
        "bytes_per_job": kept / len(events),
        "sites": sites,
        "python": platform.python_version(),
    }


def report(record: dict[str, Any]) -> str:
    lines = [
        "# What the model keeps per Job",
        "",
        f"{record['scheduledjobs']} ScheduledJobs, {record['jobs']} finished Jobs, each parsed "
        f"from its own JSON as the Job watch delivers it (Python {record['python']}).",
        "",
        f"**{record['bytes_per_job']:.0f} bytes per Job** "
        f"({record['bytes_kept'] / 1e6:.1f} MB in all).",
        "",
        "| allocated at | MB | objects |",
        "|---|---|---|",
    ]
    lines += [
        f"| {site['line']} | {site['bytes'] / 1e6:.2f} | {site['objects']} |"
        for site in record["sites"]
    ]
    lines += ["", "`make bench-jobrecords` (bench/jobrecords.py)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scheduledjobs", type=int, default=5000)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    record = measure(args.scheduledjobs, args.slots)
    text = report(record)
    save_results(args.out, "jobrecords", text, record)
    print(text)


if __name__ == "__main__":
    main()
