"""Kubernetes-style status conditions (metav1.Condition) kept in a plain list of dicts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronlease.naming import format_time


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
        changed = existing.get("status") != status
        conditions[index] = {
            "type": condition_type,
            "status": status,
            "observedGeneration": generation,
            "lastTransitionTime": format_time(now) if changed else existing["lastTransitionTime"],
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
