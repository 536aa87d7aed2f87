"""Kubernetes-style status conditions (metav1.Condition) kept in a plain list of dicts, and the
three that GitOps tools read (the kstatus conventions of sigs.k8s.io/cli-utils).

kstatus computes an object's status from `status.observedGeneration` (not yet
`metadata.generation`: InProgress), then from two "abnormal-true" conditions: `Reconciling`
(True: InProgress) and `Stalled` (True: Failed), which are present only while True and removed
otherwise, never left False; then from `Ready` (True: Current, False: InProgress), the
"normal-true" summary that Flux, Argo CD and people read. summarize() keeps the three
consistent, so every kind the operator writes status for says one of: ready, still working, or
stuck until someone acts.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from cronlease.core.names.naming import format_time

READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"


class Summary(enum.Enum):
    """What an object's status amounts to, for kstatus: Current, InProgress or Failed."""

    READY = READY  # Ready=True
    RECONCILING = RECONCILING  # Ready=False, Reconciling=True: work under way, it will end
    STALLED = STALLED  # Ready=False, Stalled=True: nothing more happens until someone acts
    # Ready=False alone: over, as someone meant it (a Run deleted while it ran, which kstatus
    # reads as Terminating first; Ready=False alone it reads as InProgress).
    ENDED = "Ended"


def set_condition(
    conditions: list[dict[str, Any]],
    condition_type: str,
    status: str,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> None:
    """Insert or update a condition in place; lastTransitionTime moves only when status changes,
    so that a reconcile that changes nothing writes an identical status (and no write at all)."""
    for index, existing in enumerate(conditions):
        if existing.get("type") != condition_type:
            continue
        # A condition someone mangled (no time) counts as changed now.
        since = existing.get("lastTransitionTime")
        changed = existing.get("status") != status or not since
        conditions[index] = {
            "type": condition_type,
            "status": status,
            "observedGeneration": generation,
            "lastTransitionTime": format_time(now) if changed else since,
            "reason": reason,
            "message": message,
        }
        return
    conditions.append(
        {
            "type": condition_type,
            "status": status,
            "observedGeneration": generation,
            "lastTransitionTime": format_time(now),
            "reason": reason,
            "message": message,
        }
    )


def remove_condition(conditions: list[dict[str, Any]], condition_type: str) -> None:
    conditions[:] = [c for c in conditions if c.get("type") != condition_type]


def find_condition(conditions: object, condition_type: str) -> dict[str, Any] | None:
    """The condition of that type in `conditions` (whatever a status holds there), if any."""
    if not isinstance(conditions, Iterable):
        return None
    return next(
        (c for c in conditions if isinstance(c, dict) and c.get("type") == condition_type), None
    )


def is_true(conditions: object, condition_type: str) -> bool:
    condition = find_condition(conditions, condition_type)
    return condition is not None and condition.get("status") == "True"


def conditions_in(status: dict[str, Any]) -> list[dict[str, Any]]:
    """status.conditions, in place, as a list of conditions: a list made if there is none, and
    what is no object dropped (set_condition reads every entry as one). The same list each time
    it is asked for, so that what one caller sets, the next one sees."""
    raw = status.get("conditions")
    if isinstance(raw, list) and all(isinstance(c, dict) for c in raw):
        return raw
    conditions = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    status["conditions"] = conditions
    return conditions


def summarize(
    conditions: list[dict[str, Any]],
    summary: Summary,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> None:
    """Set Ready, Reconciling and Stalled (in place) to say `summary`, for `reason`: Ready is
    always there, True only when ready; Reconciling and Stalled are there only when True."""
    ready = "True" if summary is Summary.READY else "False"
    set_condition(conditions, READY, ready, reason, message, generation, now)
    for abnormal in (Summary.RECONCILING, Summary.STALLED):
        if summary is abnormal:
            set_condition(conditions, abnormal.value, "True", reason, message, generation, now)
        else:
            remove_condition(conditions, abnormal.value)


def summarize_status(
    status: dict[str, Any],
    summary: Summary,
    reason: str,
    message: str,
    generation: int,
    now: datetime,
) -> None:
    """summarize() on status.conditions (in place), and the generation they describe."""
    summarize(conditions_in(status), summary, reason, message, generation, now)
    status["observedGeneration"] = generation
