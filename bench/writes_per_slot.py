"""API writes per slot, by kind, in steady state: the cost of exactly once (issue 13).

One per-minute ScheduledJob for 60 slots on the unit tests' fake API server (the same shell
main() wires: model, applier, scheduler), each run finishing before the next slot, history limit
3 (so cleanup deletes one Job a slot once full), the Job watch replayed into the model before
each decision. Every request the operator sends that is not a read is counted.

    PYTHONPATH=hack:operator:tests/unit python bench/writes_per_slot.py
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from builders import NAMESPACE
from shell import SLOT, Shell

from cronlease.kube import JOBS

SLOTS = 60
COMPLETE = {
    "status": {
        "conditions": [{"type": "Complete", "status": "True"}],
        "completionTime": "2026-01-05T08:31:00Z",
    }
}


def kind_of(method: str, path: str) -> str:
    if "/events" in path:
        return "Event (create or count)"
    if path.endswith("/status"):
        return "status write"
    if method == "POST":
        return "Job create (the first is the template's dry run)"
    if method == "PATCH":
        return "Job finalizer release"
    return "Job delete (history cleanup)"


async def main() -> None:
    shell = Shell()
    shell.create("report")
    shell.server.calls.clear()
    fed = 0

    def watch() -> None:
        nonlocal fed
        for _, change in shell.server.history[fed:]:
            if change.resource == JOBS:
                if change.event_type == "DELETED":
                    shell.model.delete_job(change.obj)
                else:
                    shell.model.upsert_job(change.obj)
        fed = len(shell.server.history)

    for index in range(SLOTS):
        shell.now = SLOT + timedelta(minutes=index, seconds=0.25)
        watch()
        for job in shell.jobs():  # the previous run has finished
            if not (job.get("status") or {}).get("conditions"):
                shell.server.edit(*JOBS, NAMESPACE, job["metadata"]["name"], COMPLETE)
        watch()
        await shell.apply("report")
    await shell.applier.drain()
    writes = Counter(kind_of(m, p) for m, p in shell.server.calls if m != "GET")
    print("| write | count | per slot |\n|---|---|---|")
    for kind, count in sorted(writes.items()):
        print(f"| {kind} | {count} | {count / SLOTS:.2f} |")
    total = sum(writes.values())
    print(f"| all | {total} | {total / SLOTS:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
