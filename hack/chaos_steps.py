"""What the chaos auditor saw of multi-step runs (issue 17), and its audit of their step
attempts. Pure: no I/O. bench/chaos.py feeds it every Run and step Job event it watches.

Whatever faults hit a run, each step's attempts (and each compensation's) must be 1..k, each
made once (one Job uid per attempt: an attempt never runs twice), no more than the step's
maxAttempts; a step that succeeded is never started again (no Job of a later attempt than the
one its Run recorded as succeeded); only a succeeded step is compensated. Runs end in a final
phase unless the Job controller was still finishing their steps when the audit looked.

The label names are spelled out here, not imported from the operator, so that a rename there
shows up in the audit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LABEL_STEP = "cronlease.io/step"
LABEL_ACTION = "cronlease.io/action"
LABEL_RUN = "cronlease.io/run"
LABEL_ATTEMPT = "cronlease.io/attempt"
FINAL = frozenset({"Succeeded", "Failed", "Compensated", "CompensationFailed"})


def is_step_job(job: dict[str, Any]) -> bool:
    return LABEL_STEP in ((job.get("metadata") or {}).get("labels") or {})


@dataclass
class StepSeen:
    """One step Job: which attempt of which step of which run, and whether it succeeded."""

    uid: str
    run: str
    step: str
    action: str
    attempt: int
    succeeded: bool = False

    def observe(self, job: dict[str, Any]) -> None:
        for condition in (job.get("status") or {}).get("conditions") or []:
            if isinstance(condition, dict) and condition.get("status") == "True":
                self.succeeded = self.succeeded or condition.get("type") == "Complete"


def step_seen(job: dict[str, Any]) -> StepSeen:
    metadata = job["metadata"]
    labels = metadata.get("labels") or {}
    attempt = str(labels.get(LABEL_ATTEMPT, ""))
    entry = StepSeen(
        uid=metadata["uid"],
        run=str(labels.get(LABEL_RUN, "")),
        step=str(labels.get(LABEL_STEP, "")),
        action=str(labels.get(LABEL_ACTION, "")),
        attempt=int(attempt) if attempt.isdigit() else 0,
    )
    entry.observe(job)
    return entry


@dataclass
class RunSeen:
    """A Run as last seen: its spec's steps (for maxAttempts) and its status."""

    uid: str
    name: str
    spec: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False
    sighting: Any = None  # its first sighting as a slot's run (hack/chaos_runs.py's Seen)

    def observe(self, run: dict[str, Any], deleted: bool = False) -> None:
        self.spec = run.get("spec") or self.spec
        self.status = run.get("status") or self.status
        self.deleted = self.deleted or deleted

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "Pending")

    def max_attempts(self, step: str, action: str) -> int:
        for entry in self.spec.get("steps") or []:
            if entry.get("name") == step:
                part = entry if action == "run" else entry.get("compensate") or {}
                return int((part.get("retry") or {}).get("maxAttempts", 1))
        return 1

    def recorded(self, step: str) -> dict[str, Any]:
        return next((e for e in self.status.get("steps") or [] if e.get("name") == step), {})


def audit_steps(runs: Iterable[RunSeen], jobs: Iterable[StepSeen]) -> dict[str, Any]:
    by_attempt: dict[tuple[str, str, str, int], set[str]] = {}
    for job in jobs:
        by_attempt.setdefault((job.run, job.step, job.action, job.attempt), set()).add(job.uid)
    twice = sum(len(uids) - 1 for uids in by_attempt.values())
    attempts: dict[tuple[str, str, str], set[int]] = {}
    for run_name, step, action, attempt in by_attempt:
        attempts.setdefault((run_name, step, action), set()).add(attempt)
    known = {run.name: run for run in runs}
    gaps = over = redone = compensated_unfinished = restarts = 0
    for (run_name, step, action), numbers in attempts.items():
        gaps += len(set(range(1, max(numbers) + 1)) - numbers)
        seen_run = known.get(run_name)
        if seen_run is None:
            continue
        over += max(0, max(numbers) - seen_run.max_attempts(step, action))
        recorded = seen_run.recorded(step)
        if action == "run" and recorded.get("phase") == "Succeeded":
            redone += sum(1 for n in numbers if n > int(recorded.get("attempt", 0)))
        if action == "compensate" and recorded.get("phase") not in ("Succeeded", None):
            compensated_unfinished += 1
    phases: dict[str, int] = {}
    for seen_run in known.values():
        phases[seen_run.phase] = phases.get(seen_run.phase, 0) + 1
        restarts += sum(
            1
            for entry in seen_run.status.get("recoveryLog") or []
            if entry.get("action") == "Restarted" and entry.get("reason") == "HeartbeatLost"
        )
    return {
        "step_runs": len(known),
        "step_jobs": sum(len(uids) for uids in by_attempt.values()),
        "step_attempts_twice": twice,
        "step_attempt_gaps": gaps,
        "step_attempts_over_max": over,
        "finished_steps_redone": redone,
        "compensated_unfinished_steps": compensated_unfinished,
        "step_runs_unfinished": sum(count for phase, count in phases.items() if phase not in FINAL),
        "heartbeat_restarts": restarts,
        "step_runs_by_phase": dict(sorted(phases.items())),
    }


MUST_BE_ZERO = (
    "step_attempts_twice",
    "step_attempt_gaps",
    "step_attempts_over_max",
    "finished_steps_redone",
    "compensated_unfinished_steps",
)
