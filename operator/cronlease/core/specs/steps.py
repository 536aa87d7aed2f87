"""spec.steps (issue 17): a multi-step run's steps, parsed and checked once.

A ScheduledJob with `steps` runs each slot as a Run (cronlease.core.bodies.runobject) whose spec
is a snapshot of the steps as parsed here, with every default filled in: the supervisor
(cronlease.core.decide.supervision) reads only the snapshot, so a later edit of the ScheduledJob
never changes a running Run.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from cronlease.core.specs.policies import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_SECONDS,
    MAX_FACTOR,
    RetryPolicy,
    SpecError,
)

MAX_STEPS = 20
# A step's name is a label value and part of Events; short, so messages stay readable.
MAX_STEP_NAME = 40
STEP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_TIMEOUT_SECONDS = 7 * 86_400
MAX_HEARTBEAT_SECONDS = 86_400
# A step's default retry: one attempt (the Job's own backoffLimit still retries pods).
DEFAULT_RETRY = RetryPolicy(max_attempts=1)


class OnFailure(enum.StrEnum):
    COMPENSATE = "Compensate"  # undo the finished steps, newest first, then escalate
    STOP = "Stop"  # leave everything as it is and escalate


@dataclass(frozen=True)
class Compensation:
    job_template: dict[str, Any]
    retry: RetryPolicy


@dataclass(frozen=True)
class Step:
    name: str
    job_template: dict[str, Any]
    depends_on: tuple[str, ...] = ()
    retry: RetryPolicy = DEFAULT_RETRY
    timeout_seconds: int | None = None  # each attempt's activeDeadlineSeconds
    heartbeat_seconds: int | None = None  # None: no heartbeat Lease
    compensate: Compensation | None = None


@dataclass(frozen=True)
class Steps:
    steps: tuple[Step, ...]
    on_failure: OnFailure = OnFailure.COMPENSATE

    def step(self, name: str) -> Step | None:
        return next((step for step in self.steps if step.name == name), None)


def parse_steps(raw: dict[str, Any], default_retry: RetryPolicy | None) -> Steps:
    """spec.steps and spec.onFailure of a ScheduledJob; SpecError names the bad field."""
    items = raw.get("steps")
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_STEPS:
        raise SpecError(f"spec.steps: must be a list of 1 to {MAX_STEPS} steps")
    steps = tuple(
        _step(item, f"spec.steps[{index}]", default_retry or DEFAULT_RETRY)
        for index, item in enumerate(items)
    )
    names = [step.name for step in steps]
    for index, step in enumerate(steps):
        if step.name in names[:index]:
            raise SpecError(f"spec.steps[{index}].name: {step.name!r} is used twice")
        for other in step.depends_on:
            if other not in names:
                raise SpecError(f"spec.steps[{index}].dependsOn: no step is named {other!r}")
            if other == step.name:
                raise SpecError(f"spec.steps[{index}].dependsOn: a step cannot depend on itself")
    cycle = _cycle(steps)
    if cycle:
        raise SpecError(f"spec.steps: dependsOn makes a cycle: {' -> '.join(cycle)}")
    on_failure = raw.get("onFailure", OnFailure.COMPENSATE.value)
    try:
        return Steps(steps, OnFailure(on_failure))
    except ValueError:
        raise SpecError(f"spec.onFailure: must be Compensate or Stop, not {on_failure!r}") from None


def snapshot(steps: Steps) -> dict[str, Any]:
    """The Run's spec fields for `steps`: every default explicit, read back by steps_of_run."""
    return {
        "onFailure": steps.on_failure.value,
        "steps": [
            {
                "name": step.name,
                "dependsOn": list(step.depends_on),
                "jobTemplate": step.job_template,
                "retry": _retry_snapshot(step.retry),
                **({"timeoutSeconds": step.timeout_seconds} if step.timeout_seconds else {}),
                **(
                    {"heartbeat": {"timeoutSeconds": step.heartbeat_seconds}}
                    if step.heartbeat_seconds
                    else {}
                ),
                **(
                    {
                        "compensate": {
                            "jobTemplate": step.compensate.job_template,
                            "retry": _retry_snapshot(step.compensate.retry),
                        }
                    }
                    if step.compensate
                    else {}
                ),
            }
            for step in steps.steps
        ],
    }


def steps_of_run(spec: dict[str, Any]) -> Steps:
    """A Run's snapshot read back; SpecError if someone wrote one the operator would not."""
    return parse_steps(spec, None)


def _retry_snapshot(retry: RetryPolicy) -> dict[str, Any]:
    return {
        "maxAttempts": retry.max_attempts,
        "backoff": {
            "initialSeconds": retry.initial_seconds,
            "factor": retry.factor,
            "maxSeconds": retry.max_seconds,
        },
    }


def _step(item: object, where: str, default_retry: RetryPolicy) -> Step:
    if not isinstance(item, dict):
        raise SpecError(f"{where}: must be an object")
    name = item.get("name")
    if not isinstance(name, str) or len(name) > MAX_STEP_NAME or not STEP_NAME.match(name):
        raise SpecError(
            f"{where}.name: must be a lowercase DNS label of at most {MAX_STEP_NAME} characters, "
            f"not {name!r}"
        )
    depends = item.get("dependsOn") or []
    if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
        raise SpecError(f"{where}.dependsOn: must be a list of step names")
    if len(set(depends)) != len(depends):
        raise SpecError(f"{where}.dependsOn: names a step twice")
    heartbeat = item.get("heartbeat")
    if heartbeat is not None and not isinstance(heartbeat, dict):
        raise SpecError(f"{where}.heartbeat: must be an object")
    compensate = item.get("compensate")
    if compensate is not None and not isinstance(compensate, dict):
        raise SpecError(f"{where}.compensate: must be an object")
    return Step(
        name=name,
        job_template=_template(item.get("jobTemplate"), f"{where}.jobTemplate"),
        depends_on=tuple(depends),
        retry=_retry(item.get("retry"), f"{where}.retry", default_retry),
        timeout_seconds=_seconds(item, "timeoutSeconds", where, MAX_TIMEOUT_SECONDS),
        heartbeat_seconds=_seconds(
            heartbeat or {}, "timeoutSeconds", f"{where}.heartbeat", MAX_HEARTBEAT_SECONDS
        ),
        compensate=(
            Compensation(
                _template(compensate.get("jobTemplate"), f"{where}.compensate.jobTemplate"),
                _retry(compensate.get("retry"), f"{where}.compensate.retry", DEFAULT_RETRY),
            )
            if compensate is not None
            else None
        ),
    )


def _template(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("spec"), dict):
        raise SpecError(f"{where}.spec: required")
    if "selector" in value["spec"]:
        raise SpecError(f"{where}.spec.selector: must not be set")
    return value


def _retry(value: object, where: str, default: RetryPolicy) -> RetryPolicy:
    if value is None:
        return default
    if not isinstance(value, dict):
        raise SpecError(f"{where}: must be an object")
    backoff = value.get("backoff") or {}
    if not isinstance(backoff, dict):
        raise SpecError(f"{where}.backoff: must be an object")
    return RetryPolicy(
        max_attempts=int(
            _number(value, "maxAttempts", where, default.max_attempts, 1, MAX_ATTEMPTS)
        ),
        initial_seconds=_number(
            backoff,
            "initialSeconds",
            f"{where}.backoff",
            default.initial_seconds,
            0,
            MAX_BACKOFF_SECONDS,
        ),
        factor=_number(backoff, "factor", f"{where}.backoff", default.factor, 1, MAX_FACTOR),
        max_seconds=_number(
            backoff, "maxSeconds", f"{where}.backoff", default.max_seconds, 0, MAX_BACKOFF_SECONDS
        ),
    )


def _number(
    section: dict[str, Any], field: str, where: str, default: float, low: float, high: float
) -> float:
    value = section.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise SpecError(
            f"{where}.{field}: must be a number from {low:g} to {high:g}, not {value!r}"
        )
    return float(value)


def _seconds(section: dict[str, Any], field: str, where: str, high: int) -> int | None:
    value = section.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise SpecError(f"{where}.{field}: must be an integer from 1 to {high}, not {value!r}")
    return value


def _cycle(steps: tuple[Step, ...]) -> list[str]:
    """A dependency cycle, as the names along it (first name repeated last); [] if none."""
    edges = {step.name: step.depends_on for step in steps}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str]:
        state[name] = 1
        path.append(name)
        for other in edges[name]:
            if state.get(other) == 1:
                return [*path[path.index(other) :], other]
            if other not in state and (found := visit(other)):
                return found
        state[name] = 2
        path.pop()
        return []

    for step in steps:
        if step.name not in state and (found := visit(step.name)):
            return found
    return []
