"""Soak, compressed: a million Job deletions through the live model, RSS sampled as they go.

Issue 13's soak is two hours of 1,000 per-minute ScheduledJobs with history cleanup, RSS sampled
every minute. This is its equivalent in-process, with no cluster and no clock: 1,000 ScheduledJobs
run once per simulated minute for about 1,000 minutes, and history cleanup deletes each one's
oldest Job once it keeps three, a million deletions in all. Everything reaches the real
`cronlease.shell.model.Model` the way the operator feeds it:

- watch events (ADDED, MODIFIED as the Job runs, finishes and has its slot-record finalizer
  released, DELETED) through the Job watch's own observer (`cronlease.shell.modelwatch`), each
  parsed from a JSON line as the list-then-watch does;
- create responses and status-write responses inside `Model.reading()`, 64 in flight at once
  (the applier's acting slots), each answered after the watch events that overtook it, so that
  every deletion meets reads in flight and leaves a tombstone;
- a relisting (a 410) every simulated hour, through the watch's own listing hook.

RSS (VmRSS of this process) and the model's sizes are sampled every 50,000 deletions. After a
warm-up (the first 100,000), RSS must stay within 5% (max against min of the samples). Results:
bench/results/soak.json, soak.md and soak.png; a run with `--label before` against the code
before tombstones expired (PYTHONPATH at an older `operator/`) adds its curve for comparison.

    make soak
    python bench/soak.py --deletions 200000 --sample-every 20000 --warmup 40000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import platform
import subprocess
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    FINALIZER_SLOT_RECORD,
    LABEL_SCHEDULEDJOB,
    TRIGGER_SCHEDULE,
    format_time,
)
from cronlease.shell.kube import LIST_PAGE, KubeApi
from cronlease.shell.listwatch import Observer
from cronlease.shell.model import Model
from cronlease.shell.modelwatch import JobWatch

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "soak"
START = datetime(2026, 1, 5, tzinfo=UTC)


class NoTransport:
    """The Job watch is only used for its observer and listing hook: it never calls out."""

    async def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("the soak makes no requests")

    def stream(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the soak opens no watches")

    async def close(self) -> None:
        pass


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def model_sizes(model: Model) -> dict[str, int]:
    """Model.sizes(), or what the code before it had to offer (the `before` run)."""
    sizes = getattr(model, "sizes", None)
    if sizes is not None:
        result: dict[str, int] = sizes()
        return result
    return {"jobs": len(model._jobs), "tombstones": len(model._tombstones)}


class Cluster:
    """What the API server would hold and send: resourceVersions, Jobs, ScheduledJobs."""

    def __init__(self, scheduledjobs: int) -> None:
        self.version = 1000
        self.owners = [(f"sj-{index:04d}", f"uid-sj-{index:04d}") for index in range(scheduledjobs)]
        self.jobs: dict[str, dict[str, Any]] = {}  # name -> the newest copy

    def stamp(self) -> str:
        self.version += 1
        return str(self.version)

    def scheduledjob(self, owner: int, minute: int) -> dict[str, Any]:
        name, uid = self.owners[owner]
        return {
            "apiVersion": "cronlease.io/v1alpha1",
            "kind": "ScheduledJob",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "uid": uid,
                "resourceVersion": self.stamp(),
                "generation": 1,
                "creationTimestamp": format_time(START),
            },
            "spec": {
                "schedule": "* * * * *",
                "successfulJobsHistoryLimit": 3,
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}},
            },
            "status": {
                "processedUntil": format_time(START + timedelta(minutes=minute)),
                "runsCreated": minute + 1,
                "leader": "soak-leader",
                "fencingToken": 1,
            },
        }

    def job(self, owner: int, minute: int, phase: str) -> dict[str, Any]:
        """The Job of `owner`'s run at `minute`, in `phase`: created, running, complete,
        released (its finalizer gone) or deleted."""
        name, uid = self.owners[owner]
        slot = START + timedelta(minutes=minute)
        job_name = f"{name}-{int(slot.timestamp()) // 60}"
        status: dict[str, Any] = {}
        if phase != "created":
            status = {"startTime": format_time(slot), "active": 1, "ready": 1}
        if phase in ("complete", "released", "deleted"):
            done = format_time(slot + timedelta(seconds=20))
            status = {
                "startTime": format_time(slot),
                "completionTime": done,
                "succeeded": 1,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": done},
                    {"type": "Complete", "status": "True", "lastTransitionTime": done},
                ],
            }
        held = phase in ("created", "running", "complete")
        obj = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name,
                "namespace": NAMESPACE,
                "uid": f"uid-{job_name}",
                "resourceVersion": self.stamp(),
                "generation": 1,
                "creationTimestamp": format_time(slot),
                "labels": {LABEL_SCHEDULEDJOB: name},
                "annotations": {
                    ANNOTATION_SCHEDULED_AT: format_time(slot),
                    ANNOTATION_TRIGGER: TRIGGER_SCHEDULE,
                    ANNOTATION_LEADER: "soak-leader",
                    ANNOTATION_FENCING_TOKEN: "1",
                },
                "finalizers": [FINALIZER_SLOT_RECORD] if held else [],
                "ownerReferences": [
                    {
                        "apiVersion": "cronlease.io/v1alpha1",
                        "kind": "ScheduledJob",
                        "name": name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "backoffLimit": 6,
                "completions": 1,
                "parallelism": 1,
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}},
            },
            "status": status,
        }
        if phase == "deleted":
            self.jobs.pop(job_name, None)
        else:
            self.jobs[job_name] = obj
        return obj


class Reads:
    """Reads in flight (create and status-write responses), answered oldest first once more
    than `window` are open: each answer reaches the model after the watch events that
    overtook it, as a slow response does."""

    def __init__(self, reading: Callable[[], contextlib.AbstractContextManager[None]], window: int):
        self.reading, self.window = reading, window
        self.open: deque[tuple[contextlib.ExitStack, Callable[[], None]]] = deque()

    def begin(self, answer: Callable[[], None]) -> None:
        stack = contextlib.ExitStack()
        stack.enter_context(self.reading())
        self.open.append((stack, answer))
        while len(self.open) > self.window:
            self.end_oldest()

    def end_oldest(self) -> None:
        stack, answer = self.open.popleft()
        with stack:
            answer()

    def drain(self) -> None:
        while self.open:
            self.end_oldest()


def line(event_type: str, obj: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj})


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.changes = 0
        self.model = Model(self._changed, on_job_finished=lambda job: None)
        # The operator's Job watch, for its observer and listing hook (cronlease.shell.modelwatch).
        job_watch = JobWatch(KubeApi(NoTransport()), self.model, (), asyncio.Event())
        self.list_watch = job_watch._watch("")
        self.observer: Observer = self.list_watch.observer
        # The code before tombstones expired has neither hook: its reads are plain calls.
        self.listing = getattr(self.list_watch, "listing", contextlib.nullcontext)
        reading = getattr(self.model, "reading", contextlib.nullcontext)
        self.reads = Reads(reading, args.in_flight)
        self.cluster = Cluster(args.scheduledjobs)
        self.deletions = 0
        self.events = 0
        self.samples: list[dict[str, Any]] = []
        self.minutes = 0
        self.most_tombstones = 0  # checked every 1,000 deletions, between the samples too
        self.started = time.monotonic()

    def _changed(self, key: Any) -> None:
        self.changes += 1

    def watched(self, event_type: str, obj: dict[str, Any]) -> None:
        """An event as the list-then-watch delivers it: one JSON line, parsed, to the observer."""
        event = orjson.loads(line(event_type, obj))
        self.observer.changed(event["type"], event["object"])
        self.events += 1

    def run(self) -> None:
        args, cluster = self.args, self.cluster
        for index in range(args.scheduledjobs):
            self.model.upsert_scheduledjob(cluster.scheduledjob(index, -1))
        self.sample()
        minute = 0
        while self.deletions < args.deletions:
            self.minute(minute)
            if minute and minute % args.relist_every == 0:
                self.relist()
            minute += 1
        self.reads.drain()
        self.minutes = minute

    def minute(self, minute: int) -> None:
        args, cluster = self.args, self.cluster
        for owner in range(args.scheduledjobs):
            # The run's create: its response comes back after some of what follows.
            created = cluster.job(owner, minute, "created")
            self.reads.begin(functools.partial(self.created, orjson.dumps(created)))
            self.watched("ADDED", created)
            self.watched("MODIFIED", cluster.job(owner, minute, "running"))
            # The previous run finishes; the status write records it; the finalizer goes.
            if minute >= 1:
                self.watched("MODIFIED", cluster.job(owner, minute - 1, "complete"))
                status = orjson.dumps(cluster.scheduledjob(owner, minute))
                self.reads.begin(functools.partial(self.status_written, status))
                self.watched("MODIFIED", cluster.job(owner, minute - 1, "released"))
            # History cleanup: the oldest beyond three finished runs goes.
            if minute >= args.history + 1 and self.deletions < args.deletions:
                self.watched("DELETED", cluster.job(owner, minute - args.history - 1, "deleted"))
                self.deletions += 1
                if self.deletions % 1000 == 0:
                    tombstones = model_sizes(self.model)["tombstones"]
                    self.most_tombstones = max(self.most_tombstones, tombstones)
                if self.deletions % args.sample_every == 0:
                    self.sample()

    def created(self, response: bytes) -> None:
        self.model.upsert_job(orjson.loads(response))

    def status_written(self, response: bytes) -> None:
        self.model.upsert_scheduledjob(orjson.loads(response))

    def relist(self) -> None:
        """A 410: the watch lists again, in pages of LIST_PAGE parsed from JSON."""
        jobs = list(self.cluster.jobs.values())
        with self.listing():
            for start in range(0, len(jobs), LIST_PAGE):
                for obj in orjson.loads(orjson.dumps(jobs[start : start + LIST_PAGE])):
                    self.observer.listed_item(obj)
        self.observer.listed(str(self.cluster.version))

    def sample(self) -> None:
        entry = {
            "deletions": self.deletions,
            "rss_mb": round(rss_mb(), 2),
            "seconds": round(time.monotonic() - self.started, 1),
            "events": self.events,
            **model_sizes(self.model),
        }
        self.samples.append(entry)
        print(
            f"{entry['deletions']:>9} deletions  RSS {entry['rss_mb']:7.1f} MB  "
            f"tombstones {entry['tombstones']:>8}  jobs {entry['jobs']:>6}  "
            f"{entry['seconds']:6.1f} s",
            flush=True,
        )


def summarise(soak: Soak, args: argparse.Namespace) -> dict[str, Any]:
    after = [s for s in soak.samples if s["deletions"] >= args.warmup]
    rss = [s["rss_mb"] for s in after]
    low, high = min(rss), max(rss)
    return {
        "label": args.label,
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "command": args.command,
        "code": args.code,
        "scheduledjobs": args.scheduledjobs,
        "history": args.history,
        "in_flight": args.in_flight,
        "relist_every_minutes": args.relist_every,
        "simulated_minutes": soak.minutes,
        "deletions": soak.deletions,
        "events": soak.events,
        "warmup_deletions": args.warmup,
        "seconds": round(time.monotonic() - soak.started, 1),
        "rss_min_mb": low,
        "rss_max_mb": high,
        "rss_spread": round((high - low) / low, 4),
        "tolerance": args.tolerance,
        "flat": (high - low) / low <= args.tolerance,
        "most_tombstones": soak.most_tombstones,
        "final_sizes": model_sizes(soak.model),
        "samples": soak.samples,
    }


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    lines = [
        "# Soak: a million Job deletions through the live model",
        "",
        "Compressed equivalent of issue 13's soak (1,000 per-minute ScheduledJobs with history",
        "cleanup): bench/soak.py feeds the real model every Job's watch events through the Job",
        "watch's observer, create and status-write responses as reads in flight (64 at once), and",
        "a relisting every simulated hour. RSS of the process, sampled every "
        f"{_every(runs):,} deletions; flat = max within 5% of min after the warm-up.",
        "",
        "| run | deletions | simulated min | wall s | RSS after warm-up, min-max MB | spread | "
        "most tombstones | flat |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, run in runs.items():
        lines.append(
            f"| {label} | {run['deletions']:,} | {run['simulated_minutes']:,} | "
            f"{run['seconds']:.0f} | {run['rss_min_mb']:.1f}-{run['rss_max_mb']:.1f} | "
            f"{run['rss_spread']:.1%} | {run['most_tombstones']:,} | "
            f"{'yes' if run['flat'] else 'NO'} |"
        )
    lines.append("")
    for label, run in runs.items():
        lines += [
            f"`{label}` ({run['started']}, {run['machine']}, code {run.get('code', '?')}): "
            f"`{run['command']}`; warm-up "
            f"{run['warmup_deletions']:,} deletions; model at the end: "
            + ", ".join(f"{k} {v:,}" for k, v in run["final_sizes"].items())
            + ".",
            "",
        ]
    lines += [
        "A `before` run is this script against older code: `git archive <commit> operator | tar "
        "-x -C /tmp/before`, then `PYTHONPATH=hack:/tmp/before/operator python bench/soak.py "
        "--label before` (a model with no `reading()` is fed the same events).",
        "",
        "Samples (RSS MB / tombstones):",
        "",
    ]
    labels = list(runs)
    lines.append("| deletions | " + " | ".join(labels) + " |")
    lines.append("|---" * (len(labels) + 1) + "|")
    by_deletions: dict[int, dict[str, str]] = {}
    for label, run in runs.items():
        for sample in run["samples"]:
            cell = f"{sample['rss_mb']:.1f} / {sample['tombstones']:,}"
            by_deletions.setdefault(sample["deletions"], {})[label] = cell
    for deletions, cells in sorted(by_deletions.items()):
        row = " | ".join(cells.get(label, "") for label in labels)
        lines.append(f"| {deletions:,} | {row} |")
    lines += ["", "Plot: soak.png."]
    return "\n".join(lines) + "\n"


def _every(runs: dict[str, dict[str, Any]]) -> int:
    samples = next(iter(runs.values()))["samples"]
    return int(samples[1]["deletions"] - samples[0]["deletions"]) if len(samples) > 1 else 0


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (rss_axes, zoom_axes, tomb_axes) = plt.subplots(
        3, 1, figsize=(8, 9), sharex=True, height_ratios=[3, 2, 2]
    )
    colours = {label: f"C{index}" for index, label in enumerate(runs)}
    for label, run in runs.items():
        x = [s["deletions"] / 1000 for s in run["samples"]]
        rss = [s["rss_mb"] for s in run["samples"]]
        rss_axes.plot(x, rss, marker=".", color=colours[label], label=label)
        tombstones = [s["tombstones"] for s in run["samples"]]
        tomb_axes.plot(x, tombstones, marker=".", color=colours[label], label=label)
    for label, run in runs.items():
        if label == "before":
            continue
        x = [s["deletions"] / 1000 for s in run["samples"]]
        zoom_axes.plot(x, [s["rss_mb"] for s in run["samples"]], marker=".", color=colours[label])
        low = run["rss_min_mb"]
        zoom_axes.axhspan(low, low * (1 + run["tolerance"]), color=colours[label], alpha=0.12)
        zoom_axes.set_ylim(low * 0.9, low * (1 + run["tolerance"]) * 1.03)
        zoom_axes.set_ylabel(f"RSS, {label} (MB)")
        zoom_axes.set_title(
            f"{label}: band = {run['tolerance']:.0%} above the minimum after warm-up"
        )
    warmup = next(iter(runs.values()))["warmup_deletions"] / 1000
    for axes in (rss_axes, zoom_axes, tomb_axes):
        axes.axvline(warmup, color="grey", linestyle=":")
        axes.grid(True, alpha=0.3)
    rss_axes.set_ylabel("RSS (MB)")
    rss_axes.set_title("Soak: 1,000 per-minute ScheduledJobs with history cleanup, compressed")
    rss_axes.legend(title="dotted: end of warm-up")
    tomb_axes.set_yscale("symlog", linthresh=10)
    tomb_axes.set_ylim(bottom=0)
    tomb_axes.set_ylabel("tombstones")
    tomb_axes.set_xlabel("Job deletions (thousands)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _code() -> str:
    """The last commit of the operator code that runs (this checkout's, unless PYTHONPATH points
    elsewhere), marked if it has changes of its own."""
    import cronlease.shell.model

    operator = Path(cronlease.shell.model.__file__).resolve().parent.parent
    git = ["git", "-C", str(operator)]
    try:
        commit = subprocess.run(
            [*git, "log", "-1", "--format=%h", "--", "."],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(operator)
    return f"{commit}{' with changes' if changed else ''}" if commit else str(operator)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deletions", type=int, default=1_000_000)
    parser.add_argument("--scheduledjobs", type=int, default=1000)
    parser.add_argument("--history", type=int, default=3, help="finished Jobs kept per object")
    parser.add_argument("--in-flight", type=int, default=64, help="reads in flight at once")
    parser.add_argument("--relist-every", type=int, default=60, help="simulated minutes")
    parser.add_argument("--sample-every", type=int, default=50_000, help="deletions")
    parser.add_argument("--warmup", type=int, default=100_000, help="deletions")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--label", default="after", help="this run's name in soak.json")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--code", default=_code(), help="what ran, for the report")
    args = parser.parse_args()
    args.command = " ".join(
        ["python bench/soak.py"]
        + [
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("out", "no_plot", "code") and v != parser.get_default(k)
        ]
    )
    gc.collect()
    soak = Soak(args)
    soak.run()
    result = summarise(soak, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "soak.json"
    runs: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    runs[args.label] = result
    runs = {label: runs[label] for label in sorted(runs, key=lambda name: name != "before")}
    path.write_text(json.dumps(runs, indent=2) + "\n")
    (out / "soak.md").write_text(markdown(runs))
    if not args.no_plot:
        plot(runs, out / "soak.png")
    verdict = "flat" if result["flat"] else "NOT flat"
    print(
        f"RSS after warm-up {result['rss_min_mb']:.1f}-{result['rss_max_mb']:.1f} MB "
        f"({result['rss_spread']:.1%}): {verdict} within {args.tolerance:.0%}"
    )
    raise SystemExit(0 if result["flat"] else 1)


if __name__ == "__main__":
    main()
