"""The live model: which watch events wake a decision, and which copies it keeps."""

from __future__ import annotations

import base64
import copy
import random
import tracemalloc
from typing import Any

import orjson
import pytest
from builders import NAME, NAMESPACE, OWNER_REF, UID

from cronlease.core.names import naming
from cronlease.core.names.naming import (
    ANNOTATION_SCHEDULED_AT,
    ANNOTATION_TRIGGER,
    LABEL_RUN,
    LABEL_SCHEDULEDJOB,
    TRIGGER_SCHEDULE,
)
from cronlease.shell.model import Key, Model, key_of, pack

OWNER: Key = (NAMESPACE, NAME)


def job_object(version: int, **status: Any) -> dict[str, Any]:
    """A Job as the watch delivers it, owned by the builders' ScheduledJob."""
    return {
        "metadata": {
            "name": f"{NAME}-29000000",
            "namespace": NAMESPACE,
            "uid": "uid-job",
            "resourceVersion": str(version),
            "creationTimestamp": "2026-01-05T09:00:00Z",
            "labels": {LABEL_SCHEDULEDJOB: NAME},
            "ownerReferences": [OWNER_REF],
        },
        "status": status,
    }


COMPLETE = {
    "startTime": "2026-01-05T09:00:00Z",
    "completionTime": "2026-01-05T09:00:02Z",
    "conditions": [{"type": "Complete", "status": "True"}],
}


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Key] = []
        self.finished: list[str] = []
        self.model = Model(
            self.changes.append,
            on_job_finished=lambda job: self.finished.append(job["metadata"]["name"]),
        )


@pytest.mark.parametrize(
    ("later_status", "wakes"),
    [
        ({"startTime": "2026-01-05T09:00:00Z", "active": 1, "ready": 1}, False),
        (
            {"startTime": "2026-01-05T09:00:00Z", "uncountedTerminatedPods": {"succeeded": ["p"]}},
            False,
        ),
        # Read only once the run has finished (history_time): at a burst every Job starts.
        ({"startTime": "2026-01-05T09:00:01Z", "active": 1}, False),
        (
            {
                "startTime": "2026-01-05T09:00:01Z",
                "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimit"}],
            },
            True,
        ),
        (COMPLETE, True),
    ],
    ids=["pod-counts", "finalizer-bookkeeping", "start-time", "failure", "completion"],
)
def test_a_job_update_wakes_its_owner_only_when_a_decision_could_change(
    later_status: dict[str, Any], wakes: bool
) -> None:
    """Each wake is a decision, and at a burst every Job's start and pod counts come as watch
    events: only what a decision reads wakes one."""
    recorder = Recorder()
    recorder.model.upsert_job(job_object(1, startTime="2026-01-05T09:00:00Z", active=1))
    assert recorder.changes == [OWNER]
    recorder.model.upsert_job(job_object(2, **later_status))
    assert recorder.changes == [OWNER] * (2 if wakes else 1)
    assert recorder.model.jobs_of(NAMESPACE, UID)[0].uid == "uid-job"


def test_a_quiet_update_is_still_stored() -> None:
    recorder = Recorder()
    recorder.model.upsert_job(job_object(1, active=1))
    recorder.model.upsert_job(job_object(2, active=1, ready=1))
    with recorder.model.reading():  # a LIST that began before the deletion
        recorder.model.delete_job(job_object(3, active=1, ready=1))
        recorder.model.upsert_job(job_object(2, active=1, ready=1))  # its late copy: buried
    assert recorder.model.jobs_of(NAMESPACE, UID) == []


def test_completion_is_counted_once_and_only_for_a_job_seen_running() -> None:
    recorder = Recorder()
    recorder.model.upsert_job(job_object(5, **COMPLETE))  # seeded finished: not a new result
    assert recorder.finished == []
    running = Recorder()
    running.model.upsert_job(job_object(1, active=1))
    running.model.upsert_job(job_object(2, **COMPLETE))
    running.model.upsert_job(job_object(3, **copy.deepcopy(COMPLETE)))
    assert running.finished == [f"{NAME}-29000000"]


def test_an_older_copy_never_replaces_a_newer_one() -> None:
    recorder = Recorder()
    recorder.model.upsert_job(job_object(7, **COMPLETE))
    recorder.model.upsert_job(job_object(6, active=1))
    assert recorder.model.jobs_of(NAMESPACE, UID)[0].finished
    assert recorder.changes == [OWNER]


def test_a_relisting_forgets_jobs_deleted_while_no_watch_was_open() -> None:
    recorder = Recorder()
    recorder.model.upsert_job(job_object(3, active=1))
    recorder.model.forget_unlisted_jobs(NAMESPACE, set(), version="10")
    assert recorder.model.jobs_of(NAMESPACE, UID) == []
    assert recorder.changes == [OWNER, OWNER]


def test_a_relisting_keeps_a_job_newer_than_itself() -> None:
    """Our own create response can be ahead of a listing served from the watch cache."""
    recorder = Recorder()
    recorder.model.upsert_job(job_object(12, active=1))
    recorder.model.forget_unlisted_jobs(NAMESPACE, set(), version="10")
    recorder.model.forget_unlisted_jobs("another-namespace", set(), version="20")
    assert [info.uid for info in recorder.model.jobs_of(NAMESPACE, UID)] == ["uid-job"]


def test_a_relisting_keeps_what_it_lists() -> None:
    recorder = Recorder()
    listed = job_object(4, **COMPLETE)
    recorder.model.upsert_job(listed)
    recorder.model.forget_unlisted_jobs("", {key_of(listed)}, version="10")
    assert recorder.model.jobs_of(NAMESPACE, UID)[0].finished
    assert recorder.changes == [OWNER]


def scheduledjob_object(version: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": UID,
            "resourceVersion": str(version),
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "team": "payments",
            },
        },
        "spec": {"schedule": "* * * * *"},
    }


def test_a_stored_scheduledjob_is_its_slim_copy_and_each_read_is_a_fresh_one() -> None:
    recorder = Recorder()
    recorder.model.upsert_scheduledjob(scheduledjob_object(5))
    first = recorder.model.scheduledjob(OWNER)
    assert first is not None
    assert "managedFields" not in first["metadata"]
    assert first["metadata"]["annotations"] == {"team": "payments"}
    first["spec"]["schedule"] = "changed by a reader"
    assert recorder.model.scheduledjob(OWNER) == {
        **first,
        "spec": {"schedule": "* * * * *"},
    }
    recorder.model.upsert_scheduledjob(scheduledjob_object(4))  # older: ignored
    assert recorder.model.scheduledjob_count == 1
    assert recorder.changes == [OWNER]
    recorder.model.delete_scheduledjob(scheduledjob_object(6))
    assert recorder.model.scheduledjob(OWNER) is None


def test_a_stored_object_takes_about_its_own_size() -> None:
    # orjson hands back its whole output buffer: kept as is, each of 5,000 ScheduledJobs took
    # 4 KiB or more for 2 KiB of JSON (docs/design-notes.md, item 100). A note that does not
    # compress, so that the packed size is about the document's.
    note = base64.b64encode(random.Random(7).randbytes(1500)).decode()
    obj = {
        "metadata": {"name": NAME, "namespace": NAMESPACE, "uid": UID, "resourceVersion": "7"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"note": note}}},
    }
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [pack(obj) for _ in range(200)]
        each = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert each < 1.5 * len(kept[0].packed), (each, len(kept[0].packed))


def test_a_stored_scheduledjob_is_compressed() -> None:
    """A template's JSON repeats itself: stored, a ScheduledJob takes about half its JSON (at
    5,000 of them, 4 MB of the operator's RSS; docs/design-notes.md, item 103)."""
    obj = scheduledjob_object(5)
    obj["spec"]["jobTemplate"] = {
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": "report", "team": "payments"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "report",
                            "image": "registry.example/payments/report:1.4.2",
                            "command": ["/bin/report", "--daily", "--out=/data/report.csv"],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                        }
                    ],
                },
            },
        }
    }
    stored = pack(obj)
    assert len(stored.packed) < 0.7 * len(orjson.dumps(stored.unpack()))
    assert stored.unpack()["spec"] == obj["spec"]


def test_a_scheduledjob_recreated_unseen_leaves_nothing_of_the_old_one() -> None:
    """Deleted and created again under its name while no watch was open (a 410 gap): the
    relisting holds the name, so only the new uid tells. The old uid's entries go, as its
    DELETED event would have taken them."""
    model = Model(lambda key: None)
    model.upsert_scheduledjob(scheduledjob_object(5))
    recreated = scheduledjob_object(9)
    recreated["metadata"]["uid"] = "uid-recreated"
    model.upsert_scheduledjob(recreated)
    assert model.sizes()["scheduledjob_uids"] == 1
    model.delete_scheduledjob(recreated)
    assert model.sizes()["scheduledjob_uids"] == 0


def test_the_jobs_of_a_burst_keep_what_they_share_once() -> None:
    """The model keeps a record of every Job for the Job's life: the slot, the instants, the
    namespace (in the record and in the key), the owner's uid, the trigger, the run named as
    its first attempt and the owner's key are kept once for the Jobs that share them, not once
    per Job and field (design notes 103 and 105)."""
    model = Model(lambda key: None)
    model.upsert_scheduledjob(scheduledjob_object(5))
    parsed = []
    for index in (1, 2):  # each parsed from its own watch event, as the watch delivers them
        obj = job_object(10 + index, **COMPLETE)
        name = obj["metadata"]["name"] = f"{NAME}-2900000{index}"
        obj["metadata"]["labels"][LABEL_RUN] = name
        obj["metadata"]["annotations"] = {
            ANNOTATION_SCHEDULED_AT: "2026-01-05T09:00:00Z",
            ANNOTATION_TRIGGER: TRIGGER_SCHEDULE,
        }
        parsed.append(orjson.loads(orjson.dumps(obj)))
        model.upsert_job(parsed[-1])
    first, second = (model._jobs[key_of(obj)] for obj in parsed)
    shared = (
        "slot",
        "created_at",
        "started_at",
        "finished_at",
        "namespace",
        "trigger",
        "owner_uid",
    )
    for field in shared:
        assert getattr(first.info, field) is getattr(second.info, field), field
    first_key, second_key = model._jobs  # the keys the model keeps
    assert first_key[0] is second_key[0] is first.info.namespace
    assert first.info.run is first.info.name
    assert first.owner == OWNER
    assert first.owner is second.owner


def test_instants_are_shared_but_a_hostile_text_is_not_kept() -> None:
    """Instants are parsed once per distinct text and the datetimes kept in a bounded cache; an
    annotation of kilobytes is no time, and the cache never holds it."""
    assert naming.parse_time("2026-01-05T09:00:00Z") is naming.parse_time("2026-01-05T09:00:00Z")
    cached = naming._parse_time_shared.cache_info().currsize
    assert naming.parse_time("2026-01-05T09:00:00Z" + " " * 100_000) is None
    assert naming._parse_time_shared.cache_info().currsize == cached
