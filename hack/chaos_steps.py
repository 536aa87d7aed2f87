"""What the chaos auditor saw of multi-step runs (issue 17), and its audit of their step
attempts. Pure: no I/O. bench/chaos.py feeds it every Run and step Job event it watches.

Whatever faults hit a run, each step's attempts (and each compensation's) must be 1..k (but
those the Run's recovery log says have no Job: CreateRefused, or HeartbeatLost before the
Job could be made), each
made once (one Job uid per attempt: an attempt never runs twice), no more than the step's
maxAttempts; a step that succeeded is never started again (no Job of a later attempt than the
one its Run recorded as succeeded); only a succeeded step is compensated. Runs end in a final
phase unless the Job controller was still finishing their steps when the audit looked; a run
whose step Jobs have all ended is final, or escalated, within STUCK_BOUND of its last progress
(issue 33: never stuck without a bound). A heartbeat lost is noticed within HEARTBEAT_SLACK of its
deadline (or of the takeover that ended a leaderless spell after it; a control plane restart
does not count), however often the operator restarted meanwhile (issue 33: restarts never
extend a heartbeat deadline); nobody renews the chaos runs' heartbeats, so the deadline is the
claim's.

The label names are spelled out here, not imported from the operator, so that a rename there
shows up in the audit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

LABEL_STEP = "cronlease.io/step"
LABEL_ACTION = "cronlease.io/action"
LABEL_RUN = "cronlease.io/run"
LABEL_ATTEMPT = "cronlease.io/attempt"
FINAL = frozenset({"Succeeded", "Failed", "Compensated", "CompensationFailed", "Cancelled"})
# A run whose step Jobs all ended is final or escalated within this long of its slot.
STUCK_BOUND = 300.0
# A heartbeat lost is noticed within this long after its deadline, or after the takeover that
# ended a leaderless spell past it, not counting API server and etcd restarts: a cold store
# filled by listing, and a few seconds of load.
HEARTBEAT_SLACK = 12.0
NO_JOB_SEEN = "no Job seen"  # the operator's words for a heartbeat lost before its Job was
LOST = re.compile(r"no heartbeat since (\S+) \(timeout (\d+) s\)")


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
    ended: bool = False  # Complete or Failed, or gone

    def observe(self, job: dict[str, Any], gone: bool = False) -> None:
        self.ended = self.ended or gone
        for condition in (job.get("status") or {}).get("conditions") or []:
            if isinstance(condition, dict) and condition.get("status") == "True":
                self.succeeded = self.succeeded or condition.get("type") == "Complete"
                self.ended = self.ended or condition.get("type") in ("Complete", "Failed")


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

    def never_made(self, step: str) -> set[int]:
        """The attempts of `step` the run recorded as having no Job: the API server refused it
        (CreateRefused), or its heartbeat deadline passed before it could be made (HeartbeatLost,
        "no Job seen")."""
        return {
            entry["attempt"]
            for entry in self.status.get("recoveryLog") or []
            if isinstance(entry, dict)
            and entry.get("step") == step
            and isinstance(entry.get("attempt"), int)
            and (
                entry.get("reason") == "CreateRefused"
                or (
                    entry.get("reason") == "HeartbeatLost"
                    and NO_JOB_SEEN in str(entry.get("message", ""))
                )
            )
        }

    def recorded(self, step: str) -> dict[str, Any]:
        return next((e for e in self.status.get("steps") or [] if e.get("name") == step), {})


def _instant(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def heartbeat_lateness(
    runs: Iterable[RunSeen],
    takeovers: Sequence[float] = (),
    outages: Sequence[tuple[float, float]] = (),
) -> list[float]:
    """For each heartbeat lost a run recorded, how long after its deadline it was noticed, or
    after the last takeover before the notice if one came later than the deadline: a leaderless
    spell (every replica killed, a Lease left to expire) delays the notice by its length, while
    a restart that extends the deadline shows as a whole timeout after the takeover. Time in
    `outages` (the API server or etcd restarting: nobody can write) does not count either."""
    late = []
    for run in runs:
        for entry in run.status.get("recoveryLog") or []:
            if not isinstance(entry, dict) or entry.get("reason") != "HeartbeatLost":
                continue
            found = LOST.search(str(entry.get("message", "")))
            noticed, since = _instant(entry.get("time")), _instant(found and found[1])
            if found is not None and noticed is not None and since is not None:
                deadline = since + int(found[2])
                led = max((t for t in takeovers if deadline < t <= noticed), default=deadline)
                down = sum(max(0.0, min(end, noticed) - max(begin, led)) for begin, end in outages)
                late.append(noticed - led - down)
    return late


def stuck(runs: Iterable[RunSeen], jobs: Iterable[StepSeen], now: float) -> list[str]:
    """Runs neither final nor escalated, STUCK_BOUND after their last progress, whose step Jobs
    have all ended: nothing outside the operator keeps them going. Progress is the slot, or the
    latest a step started, finished or was logged in the recovery log: on a loaded control plane
    a run's first step alone can take most of the bound, and a restart claimed a second before
    the audit is progress, not a stall (its Job may not be in the audit's view yet)."""
    live = {job.run for job in jobs if not job.ended}
    found = []
    for run in runs:
        slot = _instant(run.spec.get("scheduledAt"))
        escalated = any(
            isinstance(c, dict) and c.get("type") == "Escalated" and c.get("status") == "True"
            for c in run.status.get("conditions") or []
        )
        if run.deleted or run.phase in FINAL or escalated or run.name in live or slot is None:
            continue
        if now - max([slot, *_progress(run.status)]) > STUCK_BOUND:
            found.append(run.name)
    return found


def _progress(status: dict[str, Any]) -> list[float]:
    """When the operator last moved the run on, as its status says."""
    steps = [s for s in status.get("steps") or [] if isinstance(s, dict)]
    log = [e for e in status.get("recoveryLog") or [] if isinstance(e, dict)]
    times = [s.get(key) for s in steps for key in ("startedAt", "finishedAt")]
    times += [e.get("time") for e in log]
    return [t for t in map(_instant, times) if t is not None]


def audit_steps(
    runs: Iterable[RunSeen],
    jobs: Iterable[StepSeen],
    now: float | None = None,
    takeovers: Sequence[float] = (),
    outages: Sequence[tuple[float, float]] = (),
) -> dict[str, Any]:
    """`takeovers`: when the leader's Lease changed hands; `outages`: from when to when the
    control plane could take no write (epoch seconds)."""
    runs, jobs = list(runs), list(jobs)
    late = heartbeat_lateness(runs, takeovers, outages)
    stuck_runs = stuck(runs, jobs, now) if now is not None else []
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
        seen_run = known.get(run_name)
        # An attempt whose Job the API server refused (a quota), or whose heartbeat deadline
        # passed before it could be made, has no Job, and says so.
        never_made = seen_run.never_made(step) if seen_run is not None else set()
        gaps += len(set(range(1, max(numbers) + 1)) - numbers - never_made)
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
        "heartbeats_noticed_late": sum(1 for seconds in late if seconds > HEARTBEAT_SLACK),
        "heartbeat_noticed_latest_s": round(max(late, default=0.0), 1),
        "step_runs_stuck": len(stuck_runs),
        "step_runs_stuck_names": stuck_runs[:10],
        "step_runs_by_phase": dict(sorted(phases.items())),
    }


MUST_BE_ZERO = (
    "step_attempts_twice",
    "step_attempt_gaps",
    "step_attempts_over_max",
    "finished_steps_redone",
    "compensated_unfinished_steps",
    "heartbeats_noticed_late",
    "step_runs_stuck",
)
