"""The chaos auditor's audit of multi-step runs by their pods (issue 33). Pure: no I/O.

bench/chaos.py watches every pod of the namespace (as admin, from outside the operator) and
feeds this the life of each step Job's pod: from when it was first seen until it was seen gone
or finished. A step Job's name says nothing the auditor trusts; its pod names its Job by uid
(the job controller's `controller-uid` label), and the auditor knows each step Job's run, step,
action and attempt from its own watch of the Jobs (hack/chaos_steps.py). The invariants:
- a step never has two live attempts: no two pods of different attempts of one (run, step,
  action) live at once;
- no compensation runs while a step's pod lives: no compensating pod of a run beside a pod of
  one of its steps;
- nothing outlives its run: no pod of a run lives after the run let go (final, and its
  supervision finalizer gone) or was deleted;
each with SLACK for the watch's own delay in telling the auditor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# How late the auditor may learn that a pod ended, or a run let go (one watch event's delay).
SLACK = 1.0
LABEL_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
LEGACY_CONTROLLER_UID = "controller-uid"
TERMINAL = frozenset({"Succeeded", "Failed"})

MUST_BE_ZERO = (
    "step_pods_of_two_attempts_at_once",
    "compensation_beside_a_step_pod",
    "step_pods_outliving_their_run",
)


@dataclass
class PodLife:
    """A pod of a Job: which Job (by uid), and from when to when it lived, as the auditor saw."""

    job_uid: str
    began: float
    ended: float | None = None

    def observe(self, pod: dict[str, Any], now: float, deleted: bool = False) -> None:
        phase = (pod.get("status") or {}).get("phase")
        if self.ended is None and (deleted or phase in TERMINAL):
            self.ended = now

    def overlaps(self, other: PodLife) -> float:
        """How long both lived at once (seconds; an unended life lasts for ever)."""
        inf = float("inf")
        start = max(self.began, other.began)
        end = min(self.ended or inf, other.ended or inf)
        return max(0.0, end - start)


def pod_life(pod: dict[str, Any], now: float) -> PodLife | None:
    """A pod's life from its first sighting, if a Job made it."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    uid = labels.get(LABEL_CONTROLLER_UID) or labels.get(LEGACY_CONTROLLER_UID)
    if not isinstance(uid, str) or not uid:
        return None
    life = PodLife(uid, now)
    life.observe(pod, now)
    return life


@dataclass(frozen=True)
class Attempt:
    """What the auditor knows of a step Job, from its labels as it watched the Job."""

    run: str
    step: str
    action: str
    attempt: int


def audit_pods(
    pods: Iterable[PodLife],
    attempts: Mapping[str, Attempt],
    let_go: Mapping[str, float],
) -> dict[str, Any]:
    """`attempts`: step Jobs by uid; `let_go`: when each run (by name) let go or was deleted."""
    by_run: dict[str, list[tuple[Attempt, PodLife]]] = {}
    for pod in pods:
        attempt = attempts.get(pod.job_uid)
        if attempt is not None:
            by_run.setdefault(attempt.run, []).append((attempt, pod))
    two = beside = outliving = 0
    examples: list[str] = []
    for run, lives in by_run.items():
        for i, (first, one) in enumerate(lives):
            for second, other in lives[i + 1 :]:
                together = one.overlaps(other)
                if together <= SLACK:
                    continue
                same_part = (first.step, first.action) == (second.step, second.action)
                if same_part and first.attempt != second.attempt:
                    two += 1
                    examples.append(f"{run}: {first} beside {second} for {together:.1f} s")
                elif {first.action, second.action} == {"run", "compensate"}:
                    beside += 1
                    examples.append(f"{run}: {first} beside {second} for {together:.1f} s")
            ended = let_go.get(run)
            if ended is not None and (one.ended is None or one.ended > ended + SLACK):
                outliving += 1
                examples.append(f"{run}: {first} lived on after its run let go")
    return {
        "step_pods": sum(len(lives) for lives in by_run.values()),
        "step_pods_of_two_attempts_at_once": two,
        "compensation_beside_a_step_pod": beside,
        "step_pods_outliving_their_run": outliving,
        "step_pod_examples": examples[:10],
    }
