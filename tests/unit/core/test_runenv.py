"""What a run's pods know of their run: annotations on the pod template, and the same values as
environment variables of every container through the downward API."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import NAME, NAMESPACE, spec, view
from hypothesis import given
from hypothesis import strategies as st

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.bodies.runenv import (
    ENVIRONMENT,
    idempotency_key,
    run_annotations,
    with_run_environment,
)
from cronlease.core.decide.decision import PlannedRun

SLOT = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
RUN = PlannedRun(job_name="backup-29413470", slot=SLOT, trigger="Schedule")


def manual(token: str) -> PlannedRun:
    return PlannedRun(job_name="backup-m1", slot=SLOT, trigger="Manual", run_now_token=token)


def variables(container: dict[str, Any]) -> dict[str, str]:
    """Each variable's source: the annotation its fieldRef reads, else its literal value."""
    result = {}
    for item in container["env"]:
        ref = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        result[item["name"]] = ref.removeprefix("metadata.annotations['").removesuffix("']") or (
            "=" + item["value"]
        )
    return result


def test_every_container_reads_every_value_from_the_pod_templates_annotations() -> None:
    template = spec()["jobTemplate"]
    template["spec"]["template"]["spec"]["initContainers"] = [{"name": "init", "image": "x"}]
    template["spec"]["template"]["metadata"] = {"annotations": {"team": "a"}}
    job = build_job(view(spec(jobTemplate=template)), RUN, "replica-a", 3)
    pod = job["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "team": "a",
        "cronlease.io/scheduled-at": "2026-12-01T08:30:00Z",
        "cronlease.io/run": "backup-29413470",
        "cronlease.io/attempt": "1",
        "cronlease.io/trigger": "Schedule",
        "cronlease.io/idempotency-key": idempotency_key(NAMESPACE, NAME, RUN),
    }
    for container in pod["spec"]["containers"] + pod["spec"]["initContainers"]:
        sources = variables(container)
        assert sources == ENVIRONMENT
        assert all(annotation in pod["metadata"]["annotations"] for annotation in sources.values())


def test_the_users_variables_of_our_names_are_replaced_and_the_rest_follow_ours() -> None:
    job_spec = {
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "env": [
                            {"name": "CRONLEASE_ATTEMPT", "value": "7"},
                            {"name": "DAY", "value": "$(CRONLEASE_SCHEDULED_AT)"},
                        ],
                    }
                ]
            }
        }
    }
    out = with_run_environment(job_spec, run_annotations(NAMESPACE, NAME, RUN))
    env = out["template"]["spec"]["containers"][0]["env"]
    assert [item["name"] for item in env] == [*ENVIRONMENT, "DAY"]  # ours first: $(...) works
    assert {"name": "CRONLEASE_ATTEMPT", "value": "7"} not in env


@pytest.mark.parametrize(
    "broken",
    [
        {},
        {"template": "x"},
        {"template": {"spec": "x"}},
        {"template": {"spec": {"containers": "x"}}},
        {"template": {"spec": {"containers": ["x"]}}},
        {"template": {"spec": {"containers": [{"name": "m", "env": "x"}]}}},
    ],
)
def test_a_malformed_template_is_left_for_the_api_server_to_refuse(broken: dict[str, Any]) -> None:
    out = with_run_environment(copy.deepcopy(broken), run_annotations(NAMESPACE, NAME, RUN))
    template = out.get("template")
    if isinstance(template, dict):  # a pod template gains its annotations, nothing else
        assert template.pop("metadata")["annotations"]["cronlease.io/run"] == RUN.job_name
    assert out == broken


def test_the_key_is_the_slots_for_every_attempt_and_trigger_and_a_run_nows_own() -> None:
    key = idempotency_key(NAMESPACE, NAME, RUN)
    replay = PlannedRun(job_name="backup-r", slot=SLOT, trigger="Replay")
    assert idempotency_key(NAMESPACE, NAME, replay) == key
    assert run_annotations(NAMESPACE, NAME, RUN, attempt=3)["cronlease.io/idempotency-key"] == key
    assert idempotency_key("team-b", NAME, RUN) != key
    assert idempotency_key(NAMESPACE, "other", RUN) != key
    assert idempotency_key(NAMESPACE, NAME, manual("t1")) != key  # same instant, another run
    assert idempotency_key(NAMESPACE, NAME, manual("t1")) != idempotency_key(
        NAMESPACE, NAME, manual("t2")
    )
    assert len(key) == 32


@given(st.integers(0, 10**9), st.integers(0, 10**9))
def test_different_slots_have_different_keys(a: int, b: int) -> None:
    def key(offset: int) -> str:
        slot = SLOT + timedelta(milliseconds=offset)
        run = PlannedRun(job_name="x", slot=slot, trigger="Schedule")
        return idempotency_key(NAMESPACE, NAME, run)

    assert (key(a) == key(b)) == (a == b)
