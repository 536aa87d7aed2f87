"""spec.pauseOnFailure: after N runs in a row have failed, stop scheduling until a person says so.

The pause is a status condition (Paused=True), never a spec edit, so GitOps tools that own the
spec never fight it. It is lifted by a new value of the cronlease.io/resume annotation (the same
pattern as run-now), acknowledged in status.resumeToken, or by removing spec.pauseOnFailure.
The streak is status.consecutiveFailures: a run's result counts once, when it ends (Failed or
DeadLettered add one, Succeeded resets it; a run deleted before its end counts for neither).
Pure: the caller passes what ended in this decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cronlease.core.decide.decision import EventRecord, EventType
from cronlease.core.names.conditions import is_true, set_condition

PAUSED = "Paused"
FAILED_RESULTS = frozenset({"Failed", "DeadLettered"})


def update_pause(
    threshold: int,
    ended: Sequence[str],
    resume_token: str | None,
    status: dict[str, Any],
    generation: int,
    now: datetime,
) -> tuple[bool, list[EventRecord]]:
    """Update the streak, the Paused condition and the resume token in `status` (in place);
    whether the ScheduledJob is paused now, and the Events to post. `threshold` is
    pauseOnFailure.consecutiveFailures (0: not set), `ended` the results of the runs that ended
    since the last decision, oldest first."""
    events: list[EventRecord] = []
    conditions = list(status.get("conditions") or [])
    paused = is_true(conditions, PAUSED)
    streak = status.get("consecutiveFailures")
    failures = streak if isinstance(streak, int) and not isinstance(streak, bool) else 0

    def lift(reason: str, message: str) -> None:
        set_condition(conditions, PAUSED, "False", reason, message, generation, now)
        events.append(EventRecord(EventType.NORMAL, "Resumed", message))

    if resume_token and resume_token != status.get("resumeToken"):
        status["resumeToken"] = resume_token
        failures = 0
        if paused:
            paused = False
            lift("Resumed", f"resumed by cronlease.io/resume={resume_token}")
    for result in ended:
        if result in FAILED_RESULTS:
            failures += 1
        elif result == "Succeeded":
            failures = 0
    if not threshold:
        if paused:
            paused = False
            lift("PauseOnFailureUnset", "spec.pauseOnFailure was removed")
        status.pop("consecutiveFailures", None)
    else:
        status["consecutiveFailures"] = failures
        if not paused and failures >= threshold:
            paused = True
            message = (
                f"{failures} runs in a row failed (pauseOnFailure.consecutiveFailures is "
                f"{threshold}): scheduled slots are skipped until a new value of the "
                "cronlease.io/resume annotation"
            )
            reason = "ConsecutiveFailures"
            set_condition(conditions, PAUSED, "True", reason, message, generation, now)
            events.append(EventRecord(EventType.WARNING, PAUSED, message))
    if conditions:
        status["conditions"] = conditions
    return paused, events
