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
from datetime import datetime
from typing import Any

from cronlease.naming import format_time

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
