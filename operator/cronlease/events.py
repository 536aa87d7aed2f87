"""Kubernetes Events on a ScheduledJob: what `kubectl describe` shows a user about each decision."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from cronlease import GROUP, KIND, VERSION
from cronlease.kube import ApiError, KubeApi, TransportError
from cronlease.naming import format_time
from cronlease.reconcile import ObjectRef

log = logging.getLogger(__name__)
COMPONENT = "cronlease"


def event_body(
    sj: ObjectRef, event_type: str, reason: str, message: str, instance: str
) -> dict[str, Any]:
    now = format_time(datetime.now(UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{sj.name}.{uuid.uuid4().hex[:16]}", "namespace": sj.namespace},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": sj.name,
            "namespace": sj.namespace,
            "uid": sj.uid,
        },
        "type": event_type,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": COMPONENT},
        "reportingComponent": f"{GROUP}/operator",
        "reportingInstance": instance[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


async def post_event(
    api: KubeApi, sj: ObjectRef, event_type: str, reason: str, message: str, instance: str
) -> None:
    """Best effort: an Event that cannot be posted is logged, never fatal to a decision."""
    log.log(
        logging.WARNING if event_type == "Warning" else logging.INFO,
        "%s/%s %s: %s",
        sj.namespace,
        sj.name,
        reason,
        message,
    )
    try:
        await api.create_event(event_body(sj, event_type, reason, message, instance))
    except (ApiError, TransportError) as error:
        log.warning("could not post event %s on %s/%s: %s", reason, sj.namespace, sj.name, error)
