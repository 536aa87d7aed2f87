"""Failover with the election settings a user runs (the operator's defaults), while ScheduledJobs
fire every second: the leader of 3 replicas is SIGKILLed and SIGTERMed in turn, each signalled
replica started again (a Deployment's restart) and ready before the next round.

Takeover is measured from outside: from the signal to a new holder on the Lease, as a watch of
the Lease delivers it. Every slot is audited from a watch of the Jobs: lost (no Job and no
recorded skip), duplicated (two Jobs for one slot), and late (its Job seen over 2 s after the
slot, the seeds' bound); the lateness of the slots around each takeover is its cost to users.

    make failover   # or: python bench/failover.py --rounds 20 --scheduledjobs 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench_results import save_results
from chaos_runs import Seen, parse_instant
from chaos_runs import seen as first_sighting
from cronlease.shell.kube import (
    JOBS,
    LEASES,
    NAMESPACES,
    SCHEDULEDJOBS,
    KubeApi,
    connect,
    resource_path,
)
from cronlease.shell.listwatch import ListWatch
from devcluster import ensure_cluster
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.kwok import kwok_pod_template
from devcluster.replica import (
    LEASE,
    OPERATOR_NAMESPACE,
    PRODUCTION_ELECTION,
    REPO,
    OperatorProcess,
)
from percentiles import nearest_rank

SCHEDULE = "* * * * * *"  # every second
DEADLINE = 60  # far longer than any takeover: a late slot is caught up, never lost
LATE = 2.0  # the seeds ask for runs within 2 s of their time
STALL = 1.0  # a pause of the whole machine: this bench's own ticks this much apart
TARGETS = {"SIGKILL": (5.0, 6.0), "SIGTERM": (1.0, 1.0)}  # (median, p99) bounds, seconds


class LeaseSightings:
    """Each change of the Lease's holder, dated on arrival (a list-then-watch's observer)."""

    def __init__(self) -> None:
        self.holders: list[tuple[float, str]] = []
        self.moved = asyncio.Event()  # the holder changed

    def listed_item(self, obj: dict[str, Any]) -> None:
        holder = (obj.get("spec") or {}).get("holderIdentity") or ""
        if not self.holders or self.holders[-1][1] != holder:
            self.holders.append((time.time(), holder))
            self.moved.set()

    def listed(self, version: str) -> None:
        pass

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.listed_item({} if event_type == "DELETED" else obj)

    def failed(self, error: Exception) -> None:
        pass

    @property
    def holder(self) -> str:
        return self.holders[-1][1] if self.holders else ""

    async def until(self, holders: set[str]) -> float:
        """When one of `holders` took the Lease (waiting for it, for a minute at most)."""
        async with asyncio.timeout(60):
            while self.holder not in holders:
                self.moved.clear()
                await self.moved.wait()
        return self.holders[-1][0]


class JobSightings:
    """Every Job of a slot at its first sighting."""

    def __init__(self) -> None:
        self.jobs: dict[str, Seen] = {}

    def listed_item(self, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if uid not in self.jobs and (entry := first_sighting(obj, time.time())):
            self.jobs[uid] = entry

    def listed(self, version: str) -> None:
        pass

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        self.listed_item(obj)

    def failed(self, error: Exception) -> None:
        pass


class Stalls:
    """Pauses of the whole machine, seen from this process: a thread that ticks every 0.1 s
    and records when its ticks came STALL or more apart (by the wall clock, which a paused
    virtual machine's monotonic clock may not count). Every process stops then, the control
    plane too, and a takeover measured across one is the pause's, not the election's."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float]] = []  # (wall time it began, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        last = time.time()
        while not self._stop.wait(0.1):
            now = time.time()
            if now - last >= STALL:
                self.pauses.append((last, now - last))
            last = now

    def stop(self) -> None:
        self._stop.set()


def scheduledjob(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": f"f{index:03d}"},
        "spec": {
            "schedule": SCHEDULE,
            "startingDeadlineSeconds": DEADLINE,
            "catchUp": "All",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": kwok_pod_template("0s")}},
        },
    }


async def takeover(replicas: list[OperatorProcess], lease: LeaseSightings, sig: str) -> float:
    """Signal the leader; seconds until another replica holds the Lease; restart the signalled
    one, ready (its watches listed), as a standby for the next round."""
    old = next(r for r in replicas if r.running and r.identity() == lease.holder)
    others = {identity for r in replicas if r is not old and (identity := r.identity())}
    signalled = time.time()
    old.send(signal.Signals[sig])
    took = await lease.until(others) - signalled
    if sig == "SIGTERM":  # its graceful end, before anything is killed
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(old.process.wait, 15)  # type: ignore[union-attr]
    await asyncio.to_thread(old.stop, signal.SIGKILL)
    await asyncio.to_thread(old.start)
    return took


async def settled(api: KubeApi, namespace: str, until: float) -> list[dict[str, Any]]:
    """The ScheduledJobs once each has processed every slot up to `until`."""
    while True:
        listed = await api.request("GET", resource_path(SCHEDULEDJOBS, namespace))
        cursors = [
            parse_instant((sj.get("status") or {}).get("processedUntil")) for sj in listed["items"]
        ]
        if all(c is not None and c.timestamp() >= until for c in cursors):
            return list(listed["items"])
        await asyncio.sleep(0.5)


def audit(scheduledjobs: list[dict[str, Any]], jobs: dict[str, Seen], end: float) -> dict[str, Any]:
    """Every slot from each ScheduledJob's creation to `end`: its Jobs, their lateness."""
    by_slot: dict[tuple[str, float], list[Seen]] = {}
    for job in jobs.values():
        if job.attempt == 1 and not job.request_uid:
            by_slot.setdefault((job.scheduledjob, job.slot), []).append(job)
    expected = skipped = 0
    lost: list[tuple[str, float]] = []
    for sj in scheduledjobs:
        name = sj["metadata"]["name"]
        born = parse_instant(sj["metadata"]["creationTimestamp"])
        assert born is not None
        slots = range(math.floor(born.timestamp()) + 1, math.floor(end) + 1)
        expected += len(slots)
        skips = (sj.get("status") or {}).get("slotsSkipped") or {}
        skipped += sum(int(count) for count in skips.values())
        lost += [(name, slot) for slot in slots if (name, float(slot)) not in by_slot]
    lateness = {key: min(j.arrived for j in seen) - key[1] for key, seen in by_slot.items()}
    return {
        "expected": expected,
        "created": len([key for key in by_slot if key[1] <= end]),
        "lost": len(lost),
        "lost_slots": lost[:50],
        "skipped": skipped,
        "duplicated": sum(len(seen) - 1 for seen in by_slot.values()),
        "lateness": lateness,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = ensure_cluster()
    install_chart(cluster.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="cronlease-failover-"))
    operator_config = service_account_kubeconfig(cluster.kubeconfig, work / "kubeconfig")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    api = connect(8)
    namespace = f"failover-{uuid.uuid4().hex[:6]}"
    await api.request("POST", resource_path(NAMESPACES), {"metadata": {"name": namespace}})
    lease, sightings = LeaseSightings(), JobSightings()
    lease_query = [("fieldSelector", f"metadata.name={LEASE}")]
    watches = [
        asyncio.create_task(
            ListWatch(api, resource_path(LEASES, OPERATOR_NAMESPACE), lease, lease_query).run()
        ),
        asyncio.create_task(ListWatch(api, resource_path(JOBS, namespace), sightings).run()),
    ]
    replicas = [
        OperatorProcess(operator_config, work, f"failover-{i}", PRODUCTION_ELECTION)
        for i in range(args.replicas)
    ]
    rounds: list[dict[str, Any]] = []
    stalls = Stalls()
    try:
        for replica in replicas:
            await asyncio.to_thread(replica.start)
        for i in range(args.scheduledjobs):
            await api.request("POST", resource_path(SCHEDULEDJOBS, namespace), scheduledjob(i))
        await lease.until({r.identity() or "" for r in replicas} - {""})
        print(f"work dir (operator logs): {work}; ScheduledJobs in {namespace}", flush=True)
        for index in range(2 * args.rounds):
            await asyncio.sleep(args.gap)  # the slots between takeovers are on time
            sig = ("SIGKILL", "SIGTERM")[index % 2]
            signalled = time.time()
            took = await takeover(replicas, lease, sig)
            rounds.append({"signal": sig, "at": signalled, "seconds": took})
            print(f"  {index + 1:2d} {sig}: new leader after {took:.2f} s", flush=True)
        end = time.time() - 1
        scheduledjobs = await settled(api, namespace, end)
        result = audit(scheduledjobs, sightings.jobs, end)
    finally:
        stalls.stop()
        for replica in replicas:
            await asyncio.to_thread(replica.stop)
        for task in watches:
            task.cancel()
        await api.request("DELETE", resource_path(NAMESPACES, name=namespace))
        await api.close()
    ends = [entry["at"] - 1 for entry in rounds[1:]] + [math.inf]
    for entry, end in zip(rounds, ends, strict=True):
        # A round's slots: from 1 s before its signal to 1 s before the next round's.
        late = [
            value
            for (_, slot), value in result["lateness"].items()
            if entry["at"] - 1 <= slot < end
        ]
        entry["slots"] = len(late)
        entry["late_slots"] = sum(1 for value in late if value > LATE)
        entry["worst_late_s"] = max(late, default=0.0)
        entry["stalls"] = [
            [round(at, 3), round(seconds, 2)]
            for at, seconds in stalls.pauses
            if entry["at"] - 1 <= at < entry["at"] + entry["seconds"] + 1
        ]
    return {"rounds": rounds, "stalls": stalls.pauses, **result}


def report(record: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"# Failover ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"Election settings: the operator's defaults ({PRODUCTION_ELECTION['lease_duration']:g} s "
        f"lease, {PRODUCTION_ELECTION['renew_deadline']:g} s renew deadline, "
        f"{PRODUCTION_ELECTION['retry_period']:g} s retry). {args.replicas} replicas, "
        f"{args.scheduledjobs} ScheduledJobs every second (kwok pods), {args.rounds} SIGKILLs and "
        f"{args.rounds} SIGTERMs of the leader in turn, {args.gap:g} s apart once the signalled "
        "replica is back and ready. Takeover: the signal to a new holder on the Lease, as a "
        "watch of the Lease delivers it. Measured by `make failover` (bench/failover.py).",
        "",
        "| signal | kills | median s | p99 s | min s | max s | target median / p99 s | "
        "slots late > 2 s after it | worst lateness s | machine pauses during it |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for sig, (median_bound, p99_bound) in TARGETS.items():
        entries = [r for r in record["rounds"] if r["signal"] == sig]
        times = [r["seconds"] for r in entries]
        if not times:
            continue
        median, p99 = statistics.median(times), nearest_rank(times, 0.99)
        late = sum(r["late_slots"] for r in entries)
        worst = max(r["worst_late_s"] for r in entries)
        pauses = "; ".join(
            f"{len(r['stalls'])} in the {r['seconds']:.2f} s takeover "
            f"({', '.join(f'{seconds:.1f} s' for _, seconds in r['stalls'])})"
            for r in entries
            if r["stalls"]
        )
        lines.append(
            f"| {sig} | {len(times)} | {median:.2f} | {p99:.2f} | {min(times):.2f} | "
            f"{max(times):.2f} | {median_bound:g} / {p99_bound:g} | {late} | {worst:.2f} | "
            f"{pauses or 'none'} |"
        )
        met = median <= median_bound and p99 <= p99_bound
        verdicts.append(
            f"- {sig}: median {median:.2f} s, p99 {p99:.2f} s against {median_bound:g} / "
            f"{p99_bound:g} s: {'met' if met else 'MISSED'}"
        )
    lateness = list(record["lateness"].values())
    late_all = sum(1 for value in lateness if value > LATE)
    lines += [
        "",
        "| slots expected | created | lost | duplicated | skipped | late > 2 s | lateness p50 s | "
        "p99 s | max s |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {record['expected']} | {record['created']} | {record['lost']} | "
        f"{record['duplicated']} | {record['skipped']} | {late_all} | "
        f"{statistics.median(lateness):.2f} | {nearest_rank(lateness, 0.99):.2f} | "
        f"{max(lateness):.2f} |",
        "",
        "Targets:",
        "",
        *verdicts,
        f"- 0 lost and 0 duplicated slots across all {2 * args.rounds} signals: "
        + ("met" if record["lost"] == record["duplicated"] == 0 else "MISSED"),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=20, help="SIGKILLs, and as many SIGTERMs")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--scheduledjobs", type=int, default=5)
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between rounds")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    record = asyncio.run(run(args))
    text = report(record, args)
    print(text)
    lateness = record.pop("lateness")
    record["lateness_by_slot"] = [[name, slot, late] for (name, slot), late in lateness.items()]
    settings = {"election": PRODUCTION_ELECTION, **vars(args)}
    save_results(Path(args.out), "failover", text, {"settings": settings, **record})


if __name__ == "__main__":
    main()
