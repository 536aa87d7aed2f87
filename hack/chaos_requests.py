"""The chaos auditor's audit of RunRequests (replays and backfills) and their runs (issue 15).

Pure: no I/O. bench/chaos.py creates the requests, deletes some midway, and feeds this what it
saw of them (its own clock for its creates and deletes, the last status it watched) and of every
Job (hack/chaos_runs.py: each Job names its request by uid and its target by index).

For each request, by uid, and each target index:
- at most one run: one attempt-1 Job (its attempts are audited with every other run's);
- no run for a target the request does not have (an unknown uid, an index outside 0..total-1);
- a request that reached Complete has a run for every index 0..total-1 but those it skipped
  (another request replayed their run: issue 33), and its status counts
  succeeded + failed + skipped == total; a skipped target has no run;
- a request deleted midway starts no target after the API server answered the DELETE, but for a
  decision already in flight (design note 53): one created within CANCEL_SLACK is reported apart;
- no request run that has ended still holds the slot-record finalizer at the end, unless it is
  a dead letter (the request records a run's result, then releases it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from chaos_runs import ENDED, SETTLE_SECONDS, Seen, runs_of, verdict

# A Job's creationTimestamp is cut to the second, and the decision that created it may have read
# the request just before its deletion: 1 s for the cut, 1 s for that decision.
CANCEL_SLACK = 2.0
# A request has at most this many targets (the CRD's and the operator's limit).
MAX_TARGETS = 1000


# The request figures an audit must find at 0 (bench/chaos.py reports them among its own).
MUST_BE_ZERO = (
    "duplicated_targets",
    "off_target_runs",
    "complete_targets_without_run",
    "complete_counts_wrong",
    "started_after_cancel",
    "request_runs_held_at_end",
    "runs_replayed_twice",
)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _indexes(text: Any) -> set[int]:
    """Indexes in the form of a Job's completedIndexes ("0-3,7"), read here rather than with the
    operator's parser: the audit judges what it saw, not what the operator thinks it wrote."""
    found: set[int] = set()
    for part in text.split(",") if isinstance(text, str) else []:
        low, _, high = part.partition("-")
        if low.isdigit() and (high.isdigit() or not high) and int(high or low) < MAX_TARGETS:
            found.update(range(int(low), int(high or low) + 1))
    return found


@dataclass
class Request:
    """One RunRequest the chaos bench created, as it last saw it."""

    uid: str
    name: str
    scheduledjob: str
    action: str  # "Backfill" or "Replay"
    policy: str  # what the request asked for: "Forbid" or "Allow"
    created: float  # when the API server answered the create (the auditor's clock)
    deleted: float | None = None  # when the API server answered the DELETE (the auditor's clock)
    phase: str = ""
    total: int | None = None
    started: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: set[int] = field(default_factory=set)  # status.skippedIndexes
    targets: dict[int, str] = field(default_factory=dict)  # status.targets: index -> its run

    def observe(self, obj: dict[str, Any]) -> None:
        """Take a watched version's status; a request's status only moves forward, so an older
        version seen late (a relisting) is one the watch had already shown."""
        status = obj.get("status") or {}
        if not isinstance(status, dict):
            return
        self.phase = str(status.get("phase") or self.phase)
        self.total = _count(status.get("total")) if "total" in status else self.total
        self.started = _count(status.get("started")) or self.started
        self.succeeded = _count(status.get("succeeded")) or self.succeeded
        self.failed = _count(status.get("failed")) or self.failed
        self.skipped = _indexes(status.get("skippedIndexes")) or self.skipped
        targets = status.get("targets")
        for index, target in enumerate(targets if isinstance(targets, list) else []):
            if isinstance(target, dict) and isinstance(target.get("run"), str):
                self.targets.setdefault(index, target["run"])

    @property
    def live(self) -> bool:
        return self.deleted is None and self.phase not in ("Complete", "Failed")


def audit_requests(
    requests: Sequence[Request], jobs: Iterable[Seen], held: Iterable[Seen], audited_at: float
) -> dict[str, Any]:
    """`jobs` every Job seen, `held` those still holding the slot-record finalizer when they were
    listed at the end without a dead-letter label, `audited_at` the auditor's clock then."""
    seen = list(jobs)
    ours = {request.uid: request for request in requests}
    runs: dict[tuple[str, int], list[Seen]] = {}
    off_target = 0
    for job in seen:
        if not job.from_request or job.attempt != 1:
            continue
        request = ours.get(job.request_uid)
        total = request.total if request is not None else None
        if (
            request is None
            or job.request_index < 0
            or (total is not None and job.request_index >= total)
        ):
            off_target += 1
            continue
        runs.setdefault((job.request_uid, job.request_index), []).append(job)
    duplicated = sum(len({job.uid for job in found}) - 1 for found in runs.values())
    # A run is replayed once, whichever requests name it (issue 33): the replays that ran, by
    # the run their target names.
    replayed: dict[tuple[str, str], int] = {}
    for (uid, index), found in runs.items():
        request = ours[uid]
        if request.action == "Replay" and index in request.targets and found:
            key = (request.scheduledjob, request.targets[index])
            replayed[key] = replayed.get(key, 0) + 1
    without_run = wrong_counts = after_cancel = within_slack = 0
    phases: dict[str, int] = {}
    complete = {"Backfill": 0, "Replay": 0}
    targets_complete = 0
    for request in requests:
        phase = request.phase or "not yet accepted"
        if request.deleted is not None:
            phase = f"deleted midway ({phase})" if phase != "Complete" else "deleted once Complete"
        phases[phase] = phases.get(phase, 0) + 1
        if request.phase == "Complete":
            total = request.total or 0
            complete[request.action] += 1 if total else 0
            targets_complete += total
            skipped = request.skipped
            without_run += sum(
                1
                for index in range(total)
                if (request.uid, index) not in runs and index not in skipped
            )
            ran_skipped = sum(1 for index in skipped if (request.uid, index) in runs)
            counted = request.succeeded + request.failed + len(skipped)
            wrong_counts += counted != total or ran_skipped > 0
        if request.deleted is None:
            continue
        for (uid, _), found in runs.items():
            if uid != request.uid:
                continue
            for job in found:
                if job.created is None or job.created <= request.deleted:
                    continue
                if job.created > request.deleted + CANCEL_SLACK:
                    after_cancel += 1
                else:
                    within_slack += 1
    by_run = runs_of(seen)
    held_ended = 0
    for job in held:
        if not job.from_request:
            continue
        attempts = by_run[job.scheduledjob, job.run]
        settled = audited_at - SETTLE_SECONDS
        ended_at = attempts[-1].ended or attempts[-1].arrived
        if verdict(attempts, settled) in ENDED and ended_at <= settled:
            held_ended += 1
    request_runs = [attempts for attempts in by_run.values() if attempts[0].from_request]
    return {
        "requests": len(requests),
        "requests_backfill": sum(1 for r in requests if r.action == "Backfill"),
        "requests_replay": sum(1 for r in requests if r.action == "Replay"),
        "requests_cancelled": sum(1 for r in requests if r.deleted is not None),
        "backfills_complete": complete["Backfill"],
        "replays_complete": complete["Replay"],
        "request_targets_complete": targets_complete,
        "request_runs": len(request_runs),
        "request_retries": sum(len({job.attempt for job in a}) - 1 for a in request_runs),
        "duplicated_targets": duplicated,
        "off_target_runs": off_target,
        "complete_targets_without_run": without_run,
        "complete_counts_wrong": wrong_counts,
        "started_after_cancel": after_cancel,
        "started_in_flight_at_cancel": within_slack,
        "request_runs_held_at_end": held_ended,
        "runs_replayed": len(replayed),
        "runs_replayed_twice": sum(count - 1 for count in replayed.values()),
        "requests_by_phase": dict(sorted(phases.items())),
    }
