"""API writes per slot: cronlease against the built-in CronJob controller, counted by the API
server itself.

For each controller in turn: N every-minute objects (bench.py's, history limits 1) alone in a
fresh namespace, a slot to warm up (the history fills), then kube-apiserver's
`apiserver_request_total` scraped half a minute after a slot and again SLOTS minutes later: the
window holds SLOTS slots of each object, each with everything it causes. The counter has no user
label, so writes are told apart by verb and resource: a Job POST is the controller's create, a
PATCH of a Job (not its status) cronlease's release of the slot-record finalizer, a ScheduledJob's
or CronJob's status write the controller's record of the slot, a Job DELETE its history cleanup
(no TTL here). Events are written by the controller and by the job controller; the job
controller's are counted from its Event objects (one write each: every one names its own Job or
pod) and taken off. The Jobs' own writes (the job controller's Job status and pods, kwok's pod
status) are the same for both and shown apart. One operator replica, production election timings
(its Lease renewals are per second of time, not per slot, and not counted).

    make writes                              # N = 50, 3 slots each
    python bench/writes.py --n 100 --slots 5
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    CRONJOBS,
    create_namespace,
    delete_namespaces,
    gather_bounded,
    next_minute,
    remove_leftovers,
    scheduled,
    wait_settled,
    wait_until,
)

from bench_results import save_results
from cronlease.shell.kube import NAMESPACES, SCHEDULEDJOBS, KubeApi, connect, resource_path
from devcluster import ensure_cluster
from devcluster.cluster import kubectl
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.replica import PRODUCTION_ELECTION, REPO, OperatorProcess

SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}
# (verb, resource, subresource, dry run) -> requests
Counts = dict[tuple[str, str, str, str], float]
JOB_CONTROLLER = "job-controller"


def scrape(kubeconfig: Path) -> Counts:
    """kube-apiserver's request counters, summed over response codes."""
    counts: Counts = {}
    for line in kubectl(kubeconfig, "get", "--raw", "/metrics").splitlines():
        match = SAMPLE.match(line)
        if match is None:
            continue
        labels = dict(LABEL.findall(match["labels"]))
        key = (labels["verb"], labels["resource"], labels["subresource"], labels["dry_run"])
        counts[key] = counts.get(key, 0.0) + float(match["value"])
    return counts


def delta(before: Counts, after: Counts) -> Counts:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def total(counts: Counts, resources: set[str], subresource: str, verbs: set[str]) -> float:
    return sum(
        value
        for (verb, resource, sub, dry_run), value in counts.items()
        if resource in resources and sub == subresource and verb in verbs and dry_run == ""
    )


async def job_controller_events(api: KubeApi, namespace: str, start: float, end: float) -> int:
    """The job controller's Event writes in the window: one per Event object, each naming one
    Job or pod (so never aggregated into a count), by its first occurrence."""
    events = (await api.request("GET", resource_path(("v1", "events"), namespace)))["items"]
    written = 0
    for event in events:
        source = (event.get("source") or {}).get("component") or event.get("reportingComponent")
        first = event.get("firstTimestamp") or event.get("eventTime") or ""
        if source != JOB_CONTROLLER or not first:
            continue
        at = datetime.fromisoformat(first.replace("Z", "+00:00")).timestamp()
        if start <= at < end:
            written += int(event.get("count") or 1)
    return written


async def phase(
    api: KubeApi, kubeconfig: Path, controller: str, n: int, slots: int
) -> dict[str, Any]:
    namespace = f"writes-{controller}-{uuid.uuid4().hex[:5]}"
    await create_namespace(api, namespace)
    kind = "ScheduledJob" if controller == "cronlease" else "CronJob"
    path = resource_path(SCHEDULEDJOBS if controller == "cronlease" else CRONJOBS, namespace)
    await gather_bounded(
        (api.request("POST", path, scheduled(kind, f"w{i:04d}", namespace, namespace))
         for i in range(n)),
        16,
    )  # fmt: skip
    ready = await wait_settled(api, path, n) if controller == "cronlease" else time.time()
    warm_up = next_minute(ready + 5).timestamp()  # its Jobs fill the history of 1
    start = warm_up + 30  # every write of the warm-up slot is done by then
    end = start + 60 * slots
    print(f"  {controller}: {n} objects; counting from {datetime.fromtimestamp(start, UTC)}")
    await wait_until(start)
    before = await asyncio.to_thread(scrape, kubeconfig)
    await wait_until(end)
    after = await asyncio.to_thread(scrape, kubeconfig)
    theirs = await job_controller_events(api, namespace, start, end)
    await delete_namespaces(api, [namespace])
    counts = delta(before, after)
    status_resource = {"scheduledjobs" if controller == "cronlease" else "cronjobs"}
    writes = {
        "job_create": total(counts, {"jobs"}, "", {"POST"}),
        "status_write": total(counts, status_resource, "status", WRITE_VERBS - {"DELETE"}),
        "finalizer_release": total(counts, {"jobs"}, "", {"PATCH", "PUT", "APPLY"}),
        "history_delete": total(counts, {"jobs"}, "", {"DELETE"}),
        "events_all": total(counts, {"events"}, "", WRITE_VERBS),
        "events_job_controller": float(theirs),
    }
    writes["events_controller"] = writes["events_all"] - writes["events_job_controller"]
    writes["controller_total"] = sum(
        writes[key]
        for key in (
            "job_create",
            "status_write",
            "finalizer_release",
            "history_delete",
            "events_controller",
        )
    )
    jobs_own = {
        "job_status": total(counts, {"jobs"}, "status", WRITE_VERBS),
        "pod_writes": sum(
            value
            for (verb, resource, _, dry_run), value in counts.items()
            if resource == "pods" and verb in WRITE_VERBS and dry_run == ""
        ),
    }
    dry_runs = sum(
        value
        for (verb, resource, _, dry_run), value in counts.items()
        if resource == "jobs" and verb == "POST" and dry_run
    )
    due = n * slots
    return {
        "controller": controller,
        "n": n,
        "slots": slots,
        "window": [start, end],
        "slots_due": due,
        "writes": writes,
        "per_slot": {key: round(value / due, 3) for key, value in writes.items()},
        "jobs_own_per_slot": {key: round(value / due, 3) for key, value in jobs_own.items()},
        "job_dry_runs": dry_runs,
    }


ROWS = {
    "job_create": "Job create (POST)",
    "status_write": "status write (ScheduledJob / CronJob status)",
    "finalizer_release": "finalizer release (Job PATCH)",
    "history_delete": "history cleanup (Job DELETE)",
    "events_controller": "Events (POST / PATCH) by the controller",
    "controller_total": "**controller's writes per slot**",
    "events_job_controller": "(Events by the job controller, taken off)",
}


def markdown(phases: list[dict[str, Any]], command: str) -> str:
    ours, theirs = phases
    lines = [
        "# API writes per slot: cronlease vs CronJob",
        "",
        f"`{command}` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC): {ours['n']} every-minute objects "
        f"per controller, {ours['slots']} slots each counted (after a warm-up slot), history "
        "limits 1, pods that finish at once. Counted by kube-apiserver "
        "(`apiserver_request_total` by verb and resource, scraped before and after); "
        "see bench/writes.py for how writes are attributed.",
        "",
        "| writes per slot | cronlease | CronJob |",
        "|---|---|---|",
    ]
    for key, label in ROWS.items():
        lines.append(f"| {label} | {ours['per_slot'][key]:.2f} | {theirs['per_slot'][key]:.2f} |")
    lines += [
        "",
        "The Jobs' own writes, the same work for both controllers (not in the total): "
        f"Job status {ours['jobs_own_per_slot']['job_status']:.2f} vs "
        f"{theirs['jobs_own_per_slot']['job_status']:.2f}, pods "
        f"{ours['jobs_own_per_slot']['pod_writes']:.2f} vs "
        f"{theirs['jobs_own_per_slot']['pod_writes']:.2f} per slot. cronlease's dry-run Job "
        f"creates (the template check, never stored) in the window: {ours['job_dry_runs']:.0f}.",
        "",
        "Raw counts: [writes.json](writes.json).",
    ]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    cluster = ensure_cluster()
    install_chart(cluster.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="cronlease-writes-"))
    operator_config = service_account_kubeconfig(cluster.kubeconfig, work / "kubeconfig")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    api = connect(16)
    operator = OperatorProcess(operator_config, work, "writes", election=PRODUCTION_ELECTION)
    try:
        await remove_leftovers(api)
        await wait_no_terminating(api)
        operator.start()
        phases = [
            await phase(api, cluster.kubeconfig, controller, args.n, args.slots)
            for controller in ("cronlease", "cronjob")
        ]
    finally:
        operator.stop()
        await api.close()
    return phases


async def wait_no_terminating(api: KubeApi, patience: float = 180) -> None:
    """A namespace still being emptied (an earlier run's) writes too: let it go first."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        items = (await api.request("GET", resource_path(NAMESPACES)))["items"]
        if not any((item.get("status") or {}).get("phase") == "Terminating" for item in items):
            return
        await asyncio.sleep(2)
    print(f"  namespaces still terminating after {patience:.0f} s; counting anyway", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=50, help="objects per controller")
    parser.add_argument("--slots", type=int, default=3, help="slots counted per object")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    phases = asyncio.run(main_async(args))
    command = f"python bench/writes.py --n {args.n} --slots {args.slots}"
    text = markdown(phases, command)
    print(text)
    save_results(Path(args.out), "writes", text, phases)


if __name__ == "__main__":
    main()
