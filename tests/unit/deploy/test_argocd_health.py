"""The Argo CD health check (manifests/argocd/health.lua), run under Lua 5.1 as Argo CD runs it,
on the statuses the operator itself writes: Healthy, Progressing, Degraded and Suspended."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import condition, processed, run_at_spec, run_view, spec, step_job, utc, view
from lupa import lua51

from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.runrequest import summarize_request
from cronlease.core.decide.supervision import supervise
from cronlease.core.names.jobinfo import JobState

ARGOCD = Path(__file__).resolve().parents[3] / "manifests" / "argocd"
SCRIPT = (ARGOCD / "health.lua").read_text()
H9 = utc(2026, 1, 5, 9)


def to_lua(runtime: Any, value: Any) -> Any:
    """JSON as Argo CD hands it to Lua: objects and arrays as tables (arrays 1-based)."""
    if isinstance(value, dict):
        return runtime.table_from({k: to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([to_lua(runtime, v) for v in value])
    return value


def health(obj: dict[str, Any]) -> tuple[str, str]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = to_lua(runtime, obj)
    hs = runtime.execute(SCRIPT)
    return str(hs["status"]), str(hs["message"])


def obj(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    found: dict[str, Any] = {"metadata": {"name": "x", "generation": generation}}
    if status is not None:
        found["status"] = status
    return found


def test_the_configmap_carries_the_script_for_each_kind() -> None:
    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    assert cm["metadata"]["name"] == "argocd-cm"
    assert cm["data"] == {
        f"resource.customizations.health.cronlease.io_{kind}": SCRIPT
        for kind in ("ScheduledJob", "Run", "RunRequest")
    }


# --- ScheduledJob --------------------------------------------------------------------------------


def test_a_new_or_edited_scheduledjob_is_progressing_until_the_operator_saw_it() -> None:
    # What the CRD's default makes of a status nobody wrote yet.
    assert health(obj({"observedGeneration": 0})) == (
        "Progressing",
        "Waiting for the cronlease operator to observe generation 1",
    )
    assert health(obj(None))[0] == "Progressing"
    seen = decide(view(), [], H9).status
    assert health(obj(seen, generation=2))[0] == "Progressing"


def test_a_scheduled_scheduledjob_is_healthy() -> None:
    assert health(obj(decide(view(), [], H9).status)) == ("Healthy", "slots are being scheduled")


def test_an_invalid_scheduledjob_is_degraded_naming_the_field() -> None:
    status = decide(view(spec(concurrencyPolicy="Sometimes")), [], H9).status
    state, message = health(obj(status))
    assert state == "Degraded"
    assert message.startswith("InvalidSpec: ")
    assert "concurrencyPolicy" in message


def test_a_suspended_scheduledjob_is_suspended() -> None:
    status = decide(view(spec(suspend=True)), [], H9).status
    assert health(obj(status))[0] == "Suspended"


def test_a_paused_scheduledjob_is_degraded() -> None:
    pausing = spec(pauseOnFailure={"consecutiveFailures": 3})
    status = decide(view(pausing), [], H9).status
    status["conditions"].append(
        {"type": "Paused", "status": "True", "reason": "ConsecutiveFailures", "message": "3 runs"}
    )
    paused = decide(view(pausing, status=status), [], H9 + timedelta(minutes=1)).status
    assert condition(paused, "Stalled")["status"] == "True"
    assert health(obj(paused)) == ("Degraded", "Paused: 3 runs")


def test_a_one_off_that_ran_is_healthy() -> None:
    raw = run_at_spec(H9)
    status = decide(view(raw, status=processed(raw, H9)), [], H9 + timedelta(hours=1)).status
    assert health(obj(status))[0] == "Healthy"


# --- Run -----------------------------------------------------------------------------------------


def test_a_run_is_progressing_then_healthy_or_degraded() -> None:
    running = supervise(run_view(), [], {}, H9).status
    assert health(obj(running)) == ("Progressing", "Running: the steps are running")
    done = step_job(state=JobState.SUCCEEDED, finished_at=H9)
    succeeded = supervise(run_view(status=running), [done], {}, H9).status
    assert health(obj(succeeded))[0] == "Healthy"
    lost = step_job(state=JobState.FAILED, finished_at=H9)
    failed = supervise(run_view(status=running), [lost], {}, H9).status
    state, message = health(obj(failed))
    assert state == "Degraded"
    assert "step only failed" in message


# --- RunRequest ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Pending", "message": "ScheduledJob x not found"}, "Progressing"),
        ({"phase": "Running"}, "Progressing"),
        ({"phase": "Complete", "failed": 0}, "Healthy"),
        ({"phase": "Complete", "failed": 1}, "Degraded"),
        ({"phase": "Failed", "message": "spec.backfill: too many slots"}, "Degraded"),
    ],
)
def test_a_runrequest_reads_as_its_phase(status: dict[str, Any], expected: str) -> None:
    status = dict(status)
    summarize_request(status, 1, H9)
    assert health(obj(status))[0] == expected
