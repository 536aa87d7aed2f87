"""Schedules as CronJob writes them (issue 16), against the real control plane: what a CronJob
accepts passes `kubectl apply` and runs, and "@every" counts from the ScheduledJob's creation."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from devcluster.replica import OperatorProcess
from kube import (
    Kube,
    condition,
    creation_time,
    jobs_of,
    scheduled_at,
    scheduledjob,
    status_of,
    wait_for,
)

# Each was refused before issue 16 (by the CRD or the operator), and each means in CronJob what
# it means here; one per ScheduledJob, all Ready.
COMPATIBLE = {
    "equal-range": "0 0 * * 6-6",
    "equal-ranges": "5-5 6-6 * * *",
    "question-marks": "? ? ? ? ?",
    "last-day": "0 18 L * *",
    "big-step": "*/100 * * * *",
    "leading-zero": "05 09 * * MON-FRI",
    "sunday-as-7": "0 0 * * 5-7",
    "every": "@every 1h30m",
}


def test_what_cronjob_accepts_is_ready(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    for name, schedule in COMPATIBLE.items():
        kube.apply(scheduledjob(name, namespace, schedule=schedule))
    for name, schedule in COMPATIBLE.items():
        wait_for(
            lambda name=name: status_of(kube, namespace, name).get("nextScheduleTime"),
            20,
            f"{name} ({schedule}) scheduled",
        )
        assert condition(kube.get("scheduledjob", name, namespace), "Ready") == "True", name


def test_every_runs_from_the_creation(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """With "@every 3s": one Job per slot, at the creation plus whole periods of 3 s."""
    kube.apply(
        scheduledjob("every", namespace, schedule="@every 3s", successfulJobsHistoryLimit=10)
    )
    jobs = wait_for(
        lambda: (found := jobs_of(kube, namespace, "every")) and len(found) >= 3 and found,
        20,
        "3 Jobs",
    )
    created = creation_time(kube.get("scheduledjob", "every", namespace))
    slots = sorted(scheduled_at(job) for job in jobs)
    assert len(set(slots)) == len(slots), "one Job per slot"
    assert all((slot - created) % timedelta(seconds=3) == timedelta(0) for slot in slots), slots
    assert slots[0] > created


# --- jitter: a burst of same-second slots spread over the window -------------------------------

BURST = 200
JITTER = 8  # seconds; the schedule fires every 30 s


def test_jitter_spreads_a_burst(kube: Kube, namespace: str, operator: OperatorProcess) -> None:
    """200 ScheduledJobs due on the same second, with jitterSeconds 8: their Jobs are created
    over the 8 s after the slot, about evenly, each named and annotated with the nominal slot."""
    items = [
        scheduledjob(f"burst-{index:03d}", namespace, schedule="*/30 * * * * *", jitterSeconds=8)
        for index in range(BURST)
    ]
    kube.apply({"apiVersion": "v1", "kind": "List", "items": items})
    created_by = max(creation_time(item) for item in kube.items("scheduledjobs", namespace))

    def burst() -> list[dict[str, Any]] | None:
        jobs = [job for job in kube.items("jobs", namespace) if scheduled_at(job) > created_by]
        first = min((scheduled_at(job) for job in jobs), default=None)
        of_first = [job for job in jobs if scheduled_at(job) == first]
        return of_first if len(of_first) == BURST else None

    jobs = wait_for(burst, 30 + JITTER + 30, f"{BURST} Jobs of one slot")
    slot = scheduled_at(jobs[0])
    assert all(job["metadata"]["name"].endswith(f"-{int(slot.timestamp())}") for job in jobs)
    # creationTimestamp has whole seconds: count the Jobs by the second they were created in.
    delays = [int((creation_time(job) - slot).total_seconds()) for job in jobs]
    per_second = Counter(delays)
    print(f"jitter {JITTER} s, {BURST} ScheduledJobs: Jobs created per second after the slot:")
    print(dict(sorted(per_second.items())))
    assert min(delays) >= 0
    assert max(delays) <= JITTER + 1, per_second  # within the window (and a second's rounding)
    # Evenly: each of the 8 seconds holds about 25; none empty, none with a third of them.
    assert all(per_second[second] >= BURST // JITTER // 3 for second in range(JITTER)), per_second
    assert max(per_second.values()) < BURST // 3, per_second


def test_several_schedules_run_each_instant_once(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """schedules ["*/2 ...", "*/3 ..."]: a Job for every second that is a multiple of 2 or 3,
    one for those of 6 (both name them), none missing between the first and the last."""
    kube.apply(
        scheduledjob(
            "both",
            namespace,
            schedules=["*/2 * * * * *", "*/3 * * * * *"],
            successfulJobsHistoryLimit=50,
        )
    )

    def shared_slot_and_more() -> list[dict[str, Any]] | None:
        jobs = jobs_of(kube, namespace, "both")
        seconds = [int(scheduled_at(job).timestamp()) for job in jobs]
        return jobs if len(jobs) >= 6 and any(second % 6 == 0 for second in seconds) else None

    jobs = wait_for(shared_slot_and_more, 30, "6 Jobs, one of them for a shared instant")
    seconds = sorted(int(scheduled_at(job).timestamp()) for job in jobs)
    assert len(set(seconds)) == len(seconds), "one Job per instant"
    union = [t for t in range(seconds[0], seconds[-1] + 1) if t % 2 == 0 or t % 3 == 0]
    assert seconds == union
