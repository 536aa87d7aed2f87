"""Prometheus metrics, served on their own port (design decision 8).

Only the families: cronlease.shell.metricseries makes every series of the labelled counters at 0
when the process starts, from the enums the code takes their label values from."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PREFIX = "cronlease"

schedule_lag = Histogram(
    f"{PREFIX}_schedule_lag_seconds",
    "Job creation time minus the slot it runs (what CronJob calls creation skew).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
jobs_created = Counter(
    f"{PREFIX}_jobs_created_total",
    "Jobs (and Runs of multi-step ScheduledJobs) created, retries included, by trigger "
    "(Schedule, Manual, Replay, Backfill).",
    ["trigger"],
)
slots_skipped = Counter(
    f"{PREFIX}_slots_skipped_total",
    "Slots recorded as skipped instead of run, by reason (the ScheduledJob's Events name each).",
    ["reason"],
)
job_results = Counter(
    f"{PREFIX}_job_results_total",
    "Jobs that finished, by result (Succeeded, Failed) and trigger; counted by the leader only, "
    "so a sum over replicas counts each Job once (trigger is empty for a Job not created by "
    "cronlease).",
    ["result", "trigger"],
)
reconcile_errors = Counter(
    f"{PREFIX}_reconcile_errors_total",
    "API calls that failed and are retried (create, delete, release, label, status) and "
    "watches that broke (watch), by operation.",
    ["operation"],
)
scheduledjobs = Gauge(f"{PREFIX}_scheduledjobs", "ScheduledJobs in the live model.")
leader = Gauge(
    f"{PREFIX}_leader", "1 while this replica holds the leader Lease and may write, else 0."
)
fencing_token = Gauge(
    f"{PREFIX}_fencing_token",
    "The Lease's leaseTransitions when this replica last took it: the token its writes carry.",
)
leader_transitions = Counter(
    f"{PREFIX}_leader_transitions_total",
    "Times this replica took or lost the Lease (a handover counts once on each replica).",
)
lease_renewals = Histogram(
    f"{PREFIX}_lease_renewal_seconds",
    "How long a successful read and write of the leader's Lease took; a renewal that takes the "
    "renew deadline loses the Lease.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10),
)
rejected_writes = Counter(
    f"{PREFIX}_fenced_writes_rejected_total",
    "Writes refused as stale: this replica no longer held the Lease, or the API server's "
    "fencing policy refused the write (expected briefly around a takeover, then retried).",
)
clock_skew = Gauge(
    f"{PREFIX}_clock_skew_seconds",
    "Host clock minus the API server's (from its Date header, to about a second); when ahead by "
    "more than 2 s, decisions use the server's time.",
)
dead_letters = Gauge(
    f"{PREFIX}_dead_letters",
    "Jobs kept as dead letters (runs whose attempts all failed), in the live model.",
)
dead_lettered = Counter(
    f"{PREFIX}_dead_lettered_total", "Runs dead-lettered after their last attempt failed."
)
run_attempts = Counter(
    f"{PREFIX}_run_attempts_total",
    "Retries: attempt Jobs created after a failed attempt (spec.retry), by trigger.",
    ["trigger"],
)
escalations = Counter(
    f"{PREFIX}_escalations_total",
    "Multi-step runs stopped for a human to decide (the Run's Escalated condition), by reason.",
    ["reason"],
)
step_attempts = Counter(
    f"{PREFIX}_step_attempts_total",
    "Step Jobs created for multi-step runs, by action (run a step, or compensate it).",
    ["action"],
)
build_info = Gauge(
    f"{PREFIX}_build_info",
    "Always 1: the operator's version and Python version as labels.",
    ["version", "python_version"],
)
