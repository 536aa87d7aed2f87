"""How the model stores an object: its JSON, compressed with a preset dictionary.

The model keeps every ScheduledJob (and RunRequest, and Run) for as long as it exists, as one
bytes object each (cronlease.shell.model.StoredObject). Compressed alone, a ScheduledJob the bench
makes is about 725 bytes: deflate finds little to repeat inside a single 1.5 KB document. But
ScheduledJobs are alike: the same field names, the status this operator writes (its conditions,
reasons and messages), the usual pod template. zlib takes a preset dictionary of such text, and a
document is then compressed as if it followed it: the same object packs to about 310 bytes,
in about the time it took alone (decision 0015; design note 118).

The dictionary lives only in this process (nothing packed is ever written out), so changing it
changes nothing but the ratio. Its most common strings are last: deflate reaches back to the
nearest copy with the shortest distance codes.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

LEVEL = 1  # zlib's fastest: every status write's response is packed again


def _exemplar() -> dict[str, Any]:
    """A ScheduledJob as the operator writes its status, with a plain pod template."""
    stamp = "2026-01-01T00:00:00Z"
    conditions = [
        {
            "lastTransitionTime": "2026-01-01T00:00:00.000Z",
            "message": message,
            "observedGeneration": 1,
            "reason": reason,
            "status": status,
            "type": kind,
        }
        for kind, status, reason, message in (
            ("InvalidSpec", "False", "SpecValid", ""),
            ("Suspended", "False", "NotSuspended", ""),
            ("Ready", "True", "Scheduling", "slots are being scheduled"),
        )
    ]
    container = {
        "command": ["sh", "-c"],
        "image": "busybox",
        "imagePullPolicy": "IfNotPresent",
        "name": "main",
        "resources": {
            "limits": {"cpu": "100m", "memory": "64Mi"},
            "requests": {"cpu": "100m", "memory": "64Mi"},
        },
    }
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "annotations": {},
            "creationTimestamp": stamp,
            "finalizers": [],
            "generation": 1,
            "labels": {},
            "name": "",
            "namespace": "",
            "resourceVersion": "",
            "uid": "",
        },
        "spec": {
            "concurrencyPolicy": "Allow",
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {
                "metadata": {"labels": {}},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"annotations": {}, "labels": {}},
                        "spec": {
                            "containers": [container],
                            "nodeSelector": {},
                            "restartPolicy": "Never",
                            "tolerations": [{"operator": "Exists"}],
                        },
                    },
                },
            },
            "schedule": "* * * * *",
            "startingDeadlineSeconds": 60,
            "successfulJobsHistoryLimit": 3,
            "suspend": False,
            "timeZone": "UTC",
        },
        "status": {
            "active": [],
            "activeCount": 0,
            "conditions": conditions,
            "fencingToken": 1,
            "lastScheduleTime": stamp,
            "lastSuccessfulTime": stamp,
            "leader": "cronlease-0-abcdef",
            "nextScheduleTime": stamp,
            "observedGeneration": 1,
            "observedSchedule": "schedule=* * * * *;timeZone=UTC",
            "processedUntil": "2026-01-01T00:00:00.000Z",
            "recentRuns": [
                {"job": "", "result": "Succeeded", "slot": stamp, "trigger": "Schedule"}
            ],
            "runsCreated": 0,
            "slotsSkipped": {},
        },
    }


PRESET = orjson.dumps(_exemplar())


def compress(document: bytes) -> bytes:
    packer = zlib.compressobj(LEVEL, zdict=PRESET)
    return packer.compress(document) + packer.flush()


def decompress(packed: bytes) -> bytes:
    unpacker = zlib.decompressobj(zdict=PRESET)
    return unpacker.decompress(packed) + unpacker.flush()
