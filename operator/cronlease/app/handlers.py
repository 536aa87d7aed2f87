"""kopf handlers: stateless, they only feed the live model (design decision 1).

No on.create/update/resume handlers, no timers, no kopf peering: those keep per-object state in
annotations that replicas would fight over. Handlers are async so they run on the loop that owns
the model, never in a thread. kopf watches only RunRequests, which are few: ScheduledJobs and
Jobs are watched by cronlease.shell.modelwatch, which costs less per event (design note 102).
"""

from __future__ import annotations

from typing import Any, cast

import kopf

from cronlease.core.names.naming import GROUP, REQUEST_PLURAL, VERSION
from cronlease.shell.model import Model


def register(registry: kopf.OperatorRegistry, model: Model) -> None:

    @kopf.on.event(GROUP, VERSION, REQUEST_PLURAL, registry=registry)
    async def runrequest_event(event: kopf.RawEvent, **_: Any) -> None:
        if event["type"] == "DELETED":
            model.delete_runrequest(_object(event))
        else:
            model.upsert_runrequest(_object(event))


def _object(event: kopf.RawEvent) -> dict[str, Any]:
    """kopf types the raw object as a TypedDict; the model works on the plain JSON dict it is."""
    return cast("dict[str, Any]", event["object"])
