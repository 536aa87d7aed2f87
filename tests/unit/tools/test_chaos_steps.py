"""The chaos auditor's audit of multi-step runs (hack/chaos_steps.py): each flaw it must find."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chaos_steps import RunSeen, audit_steps, is_step_job, step_seen


def step_job(step: str, attempt: int, *, uid: str = "", action: str = "run",
             done: bool = True) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {
            "uid": uid or f"{step}/{action}/{attempt}",
            "labels": {
                "cronlease.io/run": "c0004-100",
                "cronlease.io/step": step,
                "cronlease.io/action": action,
                "cronlease.io/attempt": str(attempt),
            },
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}] if done else []},
    }


def run(phase: str = "Succeeded", **steps: tuple[str, int]) -> RunSeen:
    seen = RunSeen("run-uid", "c0004-100")
    seen.observe(
        {
            "spec": {
                "steps": [
                    {"name": "a", "retry": {"maxAttempts": 2},
                     "compensate": {"retry": {"maxAttempts": 1}}},
                    {"name": "b", "retry": {"maxAttempts": 2}},
                ]
            },
            "status": {
                "phase": phase,
                "steps": [
                    {"name": name, "phase": p, "attempt": n} for name, (p, n) in steps.items()
                ],
            },
        }
    )  # fmt: skip
    return seen


def audit(runs: list[RunSeen], *jobs: dict[str, Any]) -> dict[str, Any]:
    assert all(is_step_job(job) for job in jobs)
    return audit_steps(runs, [step_seen(job) for job in jobs])


def test_a_clean_run_is_clean() -> None:
    result = audit([run(a=("Succeeded", 1), b=("Succeeded", 2))],
                   step_job("a", 1), step_job("b", 1, done=False), step_job("b", 2))  # fmt: skip
    assert [result[k] for k in ("step_attempts_twice", "step_attempt_gaps",
            "step_attempts_over_max", "finished_steps_redone")] == [0, 0, 0, 0]  # fmt: skip
    assert result["step_runs_by_phase"] == {"Succeeded": 1}


def test_an_attempt_made_twice_is_found() -> None:
    result = audit([run(a=("Succeeded", 1))], step_job("a", 1), step_job("a", 1, uid="again"))
    assert result["step_attempts_twice"] == 1


def test_gaps_attempts_over_max_and_redone_steps_are_found() -> None:
    result = audit(
        [run("Running", a=("Succeeded", 1), b=("Running", 3))],
        step_job("a", 1),
        step_job("a", 2),  # after attempt 1 was recorded as succeeded
        step_job("b", 1),
        step_job("b", 3),  # no attempt 2, and beyond maxAttempts 2
    )
    assert result["finished_steps_redone"] == 1
    assert result["step_attempt_gaps"] == 1
    assert result["step_attempts_over_max"] == 1
    assert result["step_runs_unfinished"] == 1


def test_a_compensation_of_a_step_that_never_succeeded_is_found() -> None:
    result = audit(
        [run("Compensated", a=("Failed", 2))],
        step_job("a", 1, action="compensate"),
    )
    assert result["compensated_unfinished_steps"] == 1


def test_a_heartbeat_noticed_late_is_found() -> None:
    """Issue 33: restarts must not extend a heartbeat's deadline (nobody renews: the claim's)."""
    seen = run("Running", a=("Retrying", 1))
    entry = {
        "time": "2026-12-01T02:00:50Z",
        "reason": "HeartbeatLost",
        "message": "step a attempt 1 failed (HeartbeatLost): no heartbeat since "
        "2026-12-01T02:00:00.000Z (timeout 20 s)",
    }
    seen.status["recoveryLog"] = [entry]
    result = audit([seen])
    assert result["heartbeats_noticed_late"] == 1  # 30 s after its deadline
    assert result["heartbeat_noticed_latest_s"] == 30.0
    entry["time"] = "2026-12-01T02:00:25Z"
    assert audit([seen])["heartbeats_noticed_late"] == 0


def test_a_heartbeat_is_late_only_counted_from_a_takeover_after_its_deadline() -> None:
    """No leader between the deadline and a takeover (every replica killed): the new leader
    must notice soon after it takes over; one that counts the timeout from its start does not."""
    seen = run("Running", a=("Retrying", 1))
    deadline = datetime(2026, 12, 1, 2, 0, 20, tzinfo=UTC).timestamp()
    seen.status["recoveryLog"] = [
        {
            "time": "2026-12-01T02:00:50Z",
            "reason": "HeartbeatLost",
            "message": "step a attempt 1 failed (HeartbeatLost): no heartbeat since "
            "2026-12-01T02:00:00.000Z (timeout 20 s)",
        }
    ]
    found = audit_steps([seen], [], takeovers=[deadline - 5, deadline + 25])
    assert found["heartbeat_noticed_latest_s"] == 5.0  # noticed 5 s after the takeover
    assert found["heartbeats_noticed_late"] == 0
    extended = audit_steps([seen], [], takeovers=[deadline - 5, deadline + 5])
    assert extended["heartbeats_noticed_late"] == 1  # 25 s after a takeover past the deadline
    before = audit_steps([seen], [], takeovers=[deadline - 5])
    assert before["heartbeat_noticed_latest_s"] == 30.0  # a takeover before it changes nothing
    # The API server restarting from 5 s before the deadline to 25 s after: 5 s late, not 30.
    down = audit_steps([seen], [], outages=[(deadline - 5, deadline + 25)])
    assert down["heartbeat_noticed_latest_s"] == 5.0
    after = audit_steps([seen], [], outages=[(deadline + 40, deadline + 50)])
    assert after["heartbeat_noticed_latest_s"] == 30.0  # one after the notice changes nothing


def test_a_run_stuck_with_every_step_job_ended_is_found() -> None:
    seen = run("Running", a=("Running", 1))
    seen.spec["scheduledAt"] = "2026-12-01T02:00:00Z"
    slot = 1_796_090_400.0  # 2026-12-01T02:00:00Z
    ended = step_seen(step_job("a", 1))
    assert audit_steps([seen], [ended], slot + 600)["step_runs_stuck"] == 1
    assert audit_steps([seen], [ended], slot + 60)["step_runs_stuck"] == 0  # within the bound
    running = step_seen(step_job("a", 1, done=False))
    assert audit_steps([seen], [running], slot + 600)["step_runs_stuck"] == 0  # its Job runs
    seen.status["conditions"] = [{"type": "Escalated", "status": "True"}]
    assert audit_steps([seen], [ended], slot + 600)["step_runs_stuck"] == 0  # escalated


def test_a_run_that_moved_on_lately_is_not_stuck_however_old_its_slot() -> None:
    """A loaded control plane took most of the bound for the first step; the operator restarted
    the next one a second before the audit, whose view has no Job of it yet: progress."""
    seen = run("Running", a=("Running", 2))
    seen.spec["scheduledAt"] = "2026-12-01T02:00:00Z"
    slot = 1_796_090_400.0  # 2026-12-01T02:00:00Z
    ended = step_seen(step_job("a", 1))
    seen.status["steps"][0]["startedAt"] = "2026-12-01T02:09:58Z"
    assert audit_steps([seen], [ended], slot + 600)["step_runs_stuck"] == 0
    assert audit_steps([seen], [ended], slot + 598 + 301)["step_runs_stuck"] == 1


def test_an_attempt_the_api_server_refused_is_no_gap() -> None:
    """A quota refused attempt 1's Job: attempt 2's is the step's first, recorded so."""
    seen = run("Succeeded", b=("Succeeded", 2))
    assert audit([seen], step_job("a", 1), step_job("b", 2))["step_attempt_gaps"] == 1
    refusal = {"step": "b", "attempt": 1, "action": "WillRestart", "reason": "CreateRefused"}
    seen.status["recoveryLog"] = [refusal]
    assert audit([seen], step_job("a", 1), step_job("b", 2))["step_attempt_gaps"] == 0


def test_an_attempt_abandoned_before_its_job_was_made_is_no_gap() -> None:
    """A quota refused attempt 1's Job after each restart until its heartbeat deadline passed:
    abandoned with no Job, as its log entry says; a heartbeat lost by a Job that ran is not."""
    seen = run("Succeeded", b=("Succeeded", 2))
    lost = {
        "step": "b",
        "attempt": 1,
        "action": "WillRestart",
        "reason": "HeartbeatLost",
        "message": "step b attempt 1 failed (HeartbeatLost): no heartbeat since "
        "2026-12-01T02:00:00.000Z (timeout 20 s)",
    }
    seen.status["recoveryLog"] = [lost]
    assert audit([seen], step_job("a", 1), step_job("b", 2))["step_attempt_gaps"] == 1
    lost["message"] += "; no Job seen"
    assert audit([seen], step_job("a", 1), step_job("b", 2))["step_attempt_gaps"] == 0
