"""make chaos: faults on a schedule against 3 replicas and many ScheduledJobs, then an audit.

Faults, in rotation: SIGKILL the leader, SIGSTOP it for longer than its lease (then SIGCONT),
restart kube-apiserver (which drops every watch mid-stream), restart etcd, SIGKILL a standby, and
a replica stuck in a crash loop. Killed replicas come back after two seconds, as a Deployment
would bring them back.

The auditor watches from outside: every Job's ADDED event (re-listing after each outage), and the
Lease's holder and token. At the end, for each ScheduledJob, every slot between its creation and
its status.processedUntil must have exactly one Job or a skip for a reason the spec allows.
The audit goes to bench/results/chaos-latest.md for people and chaos-latest.json for tests.

    make chaos                                   # 3 minutes
    python bench/chaos.py --duration 1800        # the full run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from cronlease.cron import Schedule
from cronlease.kube import JOBS, NAMESPACES, SCHEDULEDJOBS, KubeApi, connect, resource_path
from cronlease.listwatch import ListWatch
from cronlease.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_SCHEDULED_AT,
    LABEL_SCHEDULEDJOB,
    parse_time,
)
from devcluster.cluster import Cluster, cluster_dir, ensure_cluster
from devcluster.install import install_chart, service_account_kubeconfig
from devcluster.kwok import kwok_pod_template
from devcluster.replica import ELECTION, LEASE, OPERATOR_NAMESPACE, REPO, OperatorProcess

RUN_LABEL = "chaos.cronlease.io/run"
SCHEDULE = "*/10 * * * * *"
DEADLINE = 60  # longer than any outage injected here, so no slot may be lost
ALLOWED_SKIPS = {"DeadlineExceeded", "ConcurrencyForbid"}
FAULTS = [
    "kill-leader",
    "pause-leader",
    "restart-apiserver",
    "restart-etcd",
    "kill-standby",
    "crash-loop",
]


@dataclass
class Seen:
    scheduledjob: str
    slot: datetime
    leader: str
    token: int
    arrived: float  # when the auditor first saw it (epoch seconds)


@dataclass
class Fault:
    at: float  # seconds since the faults began
    kind: str  # one of FAULTS
    applied: bool  # False when there was nobody to apply it to (no leader, no standby)
    what: str


@dataclass
class Observations:
    jobs: dict[str, Seen] = field(default_factory=dict)  # by uid
    lease: list[tuple[float, str, int]] = field(default_factory=list)  # (time, holder, token)
    faults: list[Fault] = field(default_factory=list)
    restarts: int = 0


def _seen(job: dict[str, Any]) -> Seen | None:
    metadata = job["metadata"]
    annotations = metadata.get("annotations") or {}
    slot = parse_time(annotations.get(ANNOTATION_SCHEDULED_AT))
    if slot is None:
        return None
    return Seen(
        scheduledjob=(metadata.get("labels") or {}).get(LABEL_SCHEDULEDJOB, ""),
        slot=slot,
        leader=annotations.get(ANNOTATION_LEADER, ""),
        token=int(annotations.get(ANNOTATION_FENCING_TOKEN, "-1")),
        arrived=time.time(),
    )


class JobSightings:
    """Every Job's first sighting, listed or watched (a list-then-watch's observer): after an
    API server restart the listing finds what the broken watch missed."""

    def __init__(self, seen: Observations) -> None:
        self.seen = seen

    def listed_item(self, obj: dict[str, Any]) -> None:
        if obj["metadata"]["uid"] not in self.seen.jobs and (entry := _seen(obj)):
            self.seen.jobs[obj["metadata"]["uid"]] = entry

    def listed(self, version: str) -> None:
        pass

    def changed(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "ADDED":
            self.listed_item(obj)

    def failed(self, error: Exception) -> None:
        pass  # the API server is being restarted: the list-then-watch tries again


async def watch_jobs(api: KubeApi, namespace: str, seen: Observations) -> None:
    await ListWatch(api, resource_path(JOBS, namespace), JobSightings(seen)).run()


async def poll_lease(api: KubeApi, seen: Observations) -> None:
    while True:
        try:
            spec = ((await api.get_lease(OPERATOR_NAMESPACE, LEASE)) or {}).get("spec") or {}
            state = (spec.get("holderIdentity") or "", int(spec.get("leaseTransitions") or 0))
            if not seen.lease or seen.lease[-1][1:] != state:
                seen.lease.append((time.time(), *state))
        except asyncio.CancelledError:
            raise
        except Exception:
            pass
        await asyncio.sleep(0.2)


class Replicas:
    """The operator replicas, and a Deployment's habit of restarting the ones that die."""

    def __init__(self, kubeconfig: Path, work: Path, count: int, seen: Observations) -> None:
        self.all = [OperatorProcess(kubeconfig, work, f"chaos-{i}") for i in range(count)]
        self.kubeconfig, self.work, self.seen = kubeconfig, work, seen

    def start(self) -> None:
        for replica in self.all:
            replica.start()

    def stop(self) -> None:
        for replica in self.all:
            if replica.process is not None:
                replica.send(signal.SIGCONT)
            replica.stop()

    def leader(self) -> OperatorProcess | None:
        holder = self.seen.lease[-1][1] if self.seen.lease else ""
        return next((r for r in self.all if r.running and r.identity() == holder), None)

    def standby(self) -> OperatorProcess | None:
        leader = self.leader()
        return next((r for r in self.all if r.running and r is not leader), None)

    def kill_and_restart(self, replica: OperatorProcess) -> None:
        replica.stop(signal.SIGKILL)
        time.sleep(2)  # a Deployment's restart is not instant either
        replica.start()
        self.seen.restarts += 1

    def crash_loop(self) -> None:
        """A fourth replica that dies right after starting, three times, with growing backoff."""
        looping = OperatorProcess(self.kubeconfig, self.work, "chaos-crashloop")
        for backoff in (1, 2, 4):
            looping.start()
            self.seen.restarts += 1
            time.sleep(1)
            looping.stop(signal.SIGKILL)
            time.sleep(backoff)


def inject(fault: str, cluster: Cluster, replicas: Replicas) -> tuple[bool, str]:
    """Apply one fault (blocking); return whether it was applied, and what was done."""
    if fault in ("kill-leader", "pause-leader"):
        leader = replicas.leader()
        if leader is None:
            return False, f"{fault}: no leader right now, skipped"
        if fault == "kill-leader":
            replicas.kill_and_restart(leader)
            return True, f"SIGKILL leader {leader.name}, restarted after 2 s"
        leader.send(signal.SIGSTOP)
        time.sleep(ELECTION["lease_duration"] + 2)
        leader.send(signal.SIGCONT)
        return True, f"SIGSTOP leader {leader.name} for {ELECTION['lease_duration'] + 2:.0f} s"
    if fault == "restart-apiserver":
        cluster.restart("kube-apiserver", down_seconds=2)
        return True, "restarted kube-apiserver (down 2 s, all watches dropped)"
    if fault == "restart-etcd":
        cluster.restart("etcd", down_seconds=2)
        return True, "restarted etcd (down 2 s)"
    if fault == "kill-standby":
        standby = replicas.standby()
        if standby is None:
            return False, "kill-standby: no standby right now, skipped"
        replicas.kill_and_restart(standby)
        return True, f"SIGKILL standby {standby.name}, restarted after 2 s"
    replicas.crash_loop()
    return True, "a replica crash-looped 3 times"


def audit(scheduledjobs: list[dict[str, Any]], seen: Observations) -> dict[str, Any]:
    by_slot: dict[tuple[str, datetime], set[str]] = {}
    for uid, job in seen.jobs.items():
        by_slot.setdefault((job.scheduledjob, job.slot), set()).add(uid)
    expected = created = duplicated = missing = 0
    skips: dict[str, int] = {}
    for sj in scheduledjobs:
        name = sj["metadata"]["name"]
        born = parse_time(sj["metadata"]["creationTimestamp"])
        until = parse_time((sj.get("status") or {}).get("processedUntil"))
        if born is None or until is None:
            continue
        slots = Schedule.parse(sj["spec"]["schedule"]).slots_between(born, until, limit=1_000_000)
        ran = [slot for slot in slots if (name, slot) in by_slot]
        skipped = (sj.get("status") or {}).get("slotsSkipped") or {}
        for reason, count in skipped.items():
            skips[reason] = skips.get(reason, 0) + int(count)
        expected += len(slots)
        created += len(ran)
        duplicated += sum(len(by_slot[(name, slot)]) - 1 for slot in ran)
        missing += max(0, len(slots) - len(ran) - sum(int(c) for c in skipped.values()))
    # A Job is from a stale leader if a newer token had been seen more than a second before it.
    stale = sum(
        1
        for job in seen.jobs.values()
        if any(token > job.token and at < job.arrived - 1.0 for at, _, token in seen.lease)
    )
    lags = [job.arrived - job.slot.timestamp() for job in seen.jobs.values()]
    return {
        "slots_expected": expected,
        "slots_created": created,
        "allowed_skips": sum(v for k, v in skips.items() if k in ALLOWED_SKIPS),
        "disallowed_skips": sum(v for k, v in skips.items() if k not in ALLOWED_SKIPS),
        "duplicates": duplicated,
        "silent_losses": missing,
        "stale_leader_writes": stale,
        "operator_restarts": seen.restarts,
        "leader_changes": max(0, len({token for _, _, token in seen.lease}) - 1),
        "max_lag_s": round(max(lags, default=0.0), 2),
        "skips_by_reason": skips,
    }


# The audit's figures, in the report's order, with the words the report uses for them.
LABELS = {
    "slots_expected": "slots expected",
    "slots_created": "slots created",
    "allowed_skips": "slots skipped (allowed reasons)",
    "disallowed_skips": "skipped for reasons not allowed",
    "duplicates": "duplicated",
    "silent_losses": "missing without a reason",
    "stale_leader_writes": "stale-leader writes admitted",
    "operator_restarts": "operator restarts",
    "leader_changes": "leader changes",
    "max_lag_s": "maximum lag s",
}
MUST_BE_ZERO = ("duplicates", "silent_losses", "stale_leader_writes", "disallowed_skips")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "duration_s": args.duration,
        "fault_every_s": args.fault_every,
        "scheduledjobs": args.scheduledjobs,
        "replicas": args.replicas,
        "schedule": SCHEDULE,
        "starting_deadline_s": DEADLINE,
    }


def report(result: dict[str, Any], args: argparse.Namespace, faults: list[Fault]) -> str:
    lines = [
        f"# Chaos run: {args.duration:.0f} s of faults, {args.scheduledjobs} ScheduledJobs "
        f"({SCHEDULE}, startingDeadlineSeconds {DEADLINE}), {args.replicas} replicas",
        "",
        "| figure | value | must be |",
        "|---|---|---|",
    ]
    for key, label in LABELS.items():
        lines.append(f"| {label} | {result[key]} | {'0' if key in MUST_BE_ZERO else ''} |")
    lines += [
        "",
        f"Skips by reason: {result['skips_by_reason'] or 'none'}",
        "",
        "Faults injected:",
        "",
    ]
    lines += [f"- t+{fault.at:.0f} s: {fault.what}" for fault in faults]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> int:
    if args.kubeconfig:
        loaded = Cluster.load(cluster_dir())
        if loaded is None or loaded.kubeconfig != Path(args.kubeconfig):
            sys.exit("chaos restarts control-plane components: it needs the local devcluster")
        cluster = loaded
    else:
        cluster = ensure_cluster()
    install_chart(cluster.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="cronlease-chaos-"))
    operator_config = service_account_kubeconfig(cluster.kubeconfig, work / "kubeconfig")
    os.environ["KUBECONFIG"] = str(cluster.kubeconfig)
    api = connect(32)
    seen = Observations()
    namespace = f"chaos-{uuid.uuid4().hex[:6]}"
    await api.request("POST", resource_path(NAMESPACES), {"metadata": {"name": namespace}})
    replicas = Replicas(operator_config, work, args.replicas, seen)
    await asyncio.to_thread(replicas.start)
    tasks = [
        asyncio.create_task(watch_jobs(api, namespace, seen)),
        asyncio.create_task(poll_lease(api, seen)),
    ]
    template = {"spec": {"backoffLimit": 0, "template": kwok_pod_template("1s")}}
    for i in range(args.scheduledjobs):
        await api.request(
            "POST",
            resource_path(SCHEDULEDJOBS, namespace),
            {
                "apiVersion": "cronlease.io/v1alpha1",
                "kind": "ScheduledJob",
                "metadata": {"name": f"c{i:04d}", "labels": {RUN_LABEL: namespace}},
                "spec": {
                    "schedule": SCHEDULE,
                    "startingDeadlineSeconds": DEADLINE,
                    "successfulJobsHistoryLimit": 2,
                    "failedJobsHistoryLimit": 1,
                    "jobTemplate": template,
                },
            },
        )
    start = time.time()
    print(
        f"{args.scheduledjobs} ScheduledJobs in {namespace}; faults every {args.fault_every:.0f} s",
        flush=True,
    )
    index = 0
    try:
        # Every kind of fault at least once, however short the run.
        while time.time() - start < args.duration or index < len(FAULTS):
            await asyncio.sleep(args.fault_every)
            fault = FAULTS[index % len(FAULTS)]
            index += 1
            applied, what = await asyncio.to_thread(inject, fault, cluster, replicas)
            seen.faults.append(Fault(time.time() - start, fault, applied, what))
            print(f"  t+{time.time() - start:.0f} s: {what}", flush=True)
        # Let the operator settle: catch-ups within the deadline, then a clean status everywhere.
        await asyncio.sleep(DEADLINE / 2)
        listed = await api.request("GET", resource_path(SCHEDULEDJOBS, namespace))
        await asyncio.sleep(2)  # Jobs whose creation preceded the status we just read
        result = audit(listed["items"], seen)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.to_thread(replicas.stop)
        with contextlib.suppress(Exception):  # never hide the error that got us here
            await api.request("DELETE", resource_path(NAMESPACES, name=namespace))
        await api.close()
    text = report(result, args, seen.faults)
    print(text)
    failed = [key for key in MUST_BE_ZERO if result[key]]
    record = {
        "settings": settings(args),
        "audit": result,
        "must_be_zero": list(MUST_BE_ZERO),
        "failed": failed,
        "faults": [asdict(fault) for fault in seen.faults],
    }
    save(text, record, Path(args.out))
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


def save(text: str, record: dict[str, Any], out: Path) -> None:
    """Replace the previous run's results: git keeps the history."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos-latest.md").write_text(text)
    (out / "chaos-latest.json").write_text(json.dumps(record, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=180, help="seconds of fault injection")
    parser.add_argument("--fault-every", type=float, default=20, help="seconds between faults")
    parser.add_argument("--scheduledjobs", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument(
        "--kubeconfig", help="the running devcluster's kubeconfig (default: start one)"
    )
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    sys.exit(asyncio.run(main_async(parser.parse_args())))


if __name__ == "__main__":
    main()
