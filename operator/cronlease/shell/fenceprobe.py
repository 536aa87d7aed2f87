"""At start without leader election: is the fencing policy installed? Then every write would be
refused (the policy wants the Lease holder's identity and token on each), so refuse to start,
saying why, instead of running a replica that fails every slot.

The question is asked the only way that is both least-privileged and exact: a dry-run creation of
a Job as a sole leader writes it. Admission runs on dry runs, so the policy answers as it would for
a real Job; nothing is stored, and no read access to admission policies is needed.
"""

from __future__ import annotations

import logging
from typing import Any

from cronlease.core.names.naming import (
    ANNOTATION_FENCING_TOKEN,
    ANNOTATION_LEADER,
    LABEL_SCHEDULEDJOB,
)
from cronlease.shell.kube import ApiError, KubeApi, TransportError

log = logging.getLogger(__name__)

PROBE_NAME = "cronlease-fence-probe"
REFUSED_BY_POLICY = "ValidatingAdmissionPolicy"


def probe_job(namespace: str, identity: str, token: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": PROBE_NAME,
            "namespace": namespace,
            "labels": {LABEL_SCHEDULEDJOB: PROBE_NAME},
            "annotations": {ANNOTATION_LEADER: identity, ANNOTATION_FENCING_TOKEN: str(token)},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "probe"}],
                }
            }
        },
    }


async def fencing_refusal(api: KubeApi, namespace: str, identity: str, token: int) -> str | None:
    """The policy's refusal of a sole leader's Job in `namespace`, or None. Anything else that
    goes wrong (no connection, no rights) is logged and left to the operator's own writes to
    report: this check must never be why an operator that would work does not start."""
    try:
        await api.create_job(probe_job(namespace, identity, token), dry_run=True)
    except ApiError as error:
        if error.status in (400, 403, 422) and REFUSED_BY_POLICY in error.body:
            return error.message
        log.warning("could not check for the fencing policy in %s: %s", namespace, error)
    except TransportError as error:
        log.warning("could not check for the fencing policy in %s: %s", namespace, error)
    return None
