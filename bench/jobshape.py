"""What a Job's shape costs the control plane (issue 19, item 1).

One plain client creates N Jobs at once, in four shapes in turn:
- `plain`: the bench's raw Job, a label and the pod template;
- `cronlease`: the Job the operator builds for the bench's ScheduledJob, owner reference
  included (the run's labels, annotations, pod annotations and downward-API variables), its
  finalizer left out so that nothing has to release it, and its cronlease.io keys renamed to
  keys of the same length, which the fence would not let an admin write;
- `cronlease-literal`: the same with the variables' values written in, not read from the pod's
  annotations;
- `cronlease-metadata`: ours on the Job only, its pods as the template's.
Shapes alternate over the rounds, so that drift on the machine falls on all of them. Measured:
the create time, and the CPU seconds of the whole control plane (kube-apiserver, etcd,
kube-controller-manager, kwok) from the first create to 2 s after the last, from /proc: the
window of a burst. Nothing of the operator runs, and the chart is not installed (its fence
refuses Jobs no leader wrote).

    python bench/jobshape.py --n 1000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    CREATE_CONCURRENCY,
    TICK,
    create_namespace,
    delete_namespaces,
    gather_bounded,
    job_template,
    remove_leftovers,
    scheduled,
)

from cronlease.shell.kube import KubeApi, connect, resource_path
from devcluster import ensure_cluster
from devcluster.replica import REPO
from operator_jobs import operator_jobs

CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kwok")
POLICY_BINDINGS = ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings")
# /proc/<pid>/stat holds a command's first 15 characters ("kube-controller").
CONTROL_PLANE_COMMANDS = {name[:15]: name for name in CONTROL_PLANE}
SHAPES = ("plain", "cronlease", "cronlease-literal", "cronlease-metadata")
# CPU is counted from the first create to this long after the last: kube-controller-manager
# creates pods at its default 20 requests a second, so their whole life is not this measure.
AFTERMATH = 2.0


def control_plane_cpu() -> dict[str, float]:
    """CPU seconds used so far by each control-plane process (found by its command name)."""
    used: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone between the listing and the read
        command = text[text.index("(") + 1 : text.rindex(")")]
        if command in CONTROL_PLANE_COMMANDS:
            fields = text.rsplit(")", 1)[1].split()
            name = CONTROL_PLANE_COMMANDS[command]
            used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) * TICK
    return used


def plain_job(namespace: str, index: int, run_id: str) -> dict[str, Any]:
    template = job_template(run_id)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"j-{index:05d}", "namespace": namespace, **template["metadata"]},
        "spec": template["spec"],
    }


async def one_round(api: KubeApi, shape: str, n: int, run_id: str) -> dict[str, float]:
    namespace = f"jobshape-{shape}-{uuid.uuid4().hex[:5]}"
    await create_namespace(api, namespace)
    jobs: list[dict[str, Any]]
    if shape == "plain":
        jobs = [plain_job(namespace, i, run_id) for i in range(n)]
    else:
        owner = scheduled("ScheduledJob", "owner", namespace, run_id)
        jobs = await operator_jobs(api, owner, n, literal=shape == "cronlease-literal")
        if shape == "cronlease-metadata":  # ours on the Job only: the pods as the template's
            for job in jobs:
                job["spec"] = job_template(run_id)["spec"]
    size = statistics.fmean(len(json.dumps(job)) for job in jobs)
    cpu_before, started = control_plane_cpu(), time.perf_counter()
    await gather_bounded((api.create_job(job) for job in jobs), CREATE_CONCURRENCY)
    created = time.perf_counter() - started
    await asyncio.sleep(AFTERMATH)  # the watch fan-out and the first pods of the last Jobs
    cpu_after = control_plane_cpu()
    await delete_namespaces(api, [namespace])
    result = {
        "job_bytes": size,
        "create_s": created,
        **{
            f"cpu_{name}": cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0)
            for name in CONTROL_PLANE
        },
    }
    result["cpu_total"] = sum(result[f"cpu_{name}"] for name in CONTROL_PLANE)
    print(f"  {shape}: {json.dumps({k: round(v, 2) for k, v in result.items()})}", flush=True)
    return result


async def main_async(args: argparse.Namespace) -> None:
    os.environ["KUBECONFIG"] = str(ensure_cluster().kubeconfig)
    api = connect(CREATE_CONCURRENCY)
    bindings = await api.request("GET", resource_path(POLICY_BINDINGS))
    if any(item["metadata"]["name"].startswith("cronlease") for item in bindings["items"]):
        await api.close()
        raise SystemExit(
            "the chart's fencing refuses Jobs that no leader writes: run this on a control "
            "plane without it (make cluster-down first)"
        )
    await remove_leftovers(api)
    run_id = uuid.uuid4().hex[:8]
    rounds: dict[str, list[dict[str, float]]] = {shape: [] for shape in SHAPES}
    try:
        for index in range(args.rounds):
            print(f"round {index + 1} of {args.rounds}, N={args.n}", flush=True)
            for shape in SHAPES:
                rounds[shape].append(await one_round(api, shape, args.n, run_id))
    finally:
        await api.close()
    write(args, rounds)


def write(args: argparse.Namespace, rounds: dict[str, list[dict[str, float]]]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "jobshape.json").write_text(json.dumps({"n": args.n, "rounds": rounds}, indent=2))
    plain = {key: statistics.median(r[key] for r in rounds["plain"]) for key in rounds["plain"][0]}
    lines = [
        "# What a Job's shape costs the control plane",
        "",
        f"`python bench/jobshape.py --n {args.n} --rounds {args.rounds}` "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC): medians over the rounds, ratios to `plain`.",
        "",
        "| shape | bytes | create s | x plain | control-plane CPU s | x plain | apiserver | etcd "
        "| controller-manager | kwok |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        m = {key: statistics.median(r[key] for r in rounds[shape]) for key in rounds[shape][0]}
        lines.append(
            f"| {shape} | {m['job_bytes']:.0f} | {m['create_s']:.2f} | "
            f"{m['create_s'] / plain['create_s']:.2f} | {m['cpu_total']:.1f} | "
            f"{m['cpu_total'] / plain['cpu_total']:.2f} | {m['cpu_kube-apiserver']:.1f} | "
            f"{m['cpu_etcd']:.1f} | {m['cpu_kube-controller-manager']:.1f} | {m['cpu_kwok']:.1f} |"
        )
    report = "\n".join(lines) + "\n"
    (out / "jobshape.md").write_text(report)
    print(report)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
