"""Events are aggregated: one Event per (ScheduledJob, type, reason) with a count, patched as it
recurs, found again by a later leader, and started anew after a pause longer than the window."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Any

from builders import NAMESPACE
from harness import Shell, eventually

from cronlease.core.decide.decision import ObjectRef
from cronlease.shell.applier import Outcome
from cronlease.shell.events import MAX_NAME, EventRecorder, event_name
from cronlease.shell.kube import EVENTS, KubeApi

FORBID = "SkippedConcurrencyForbid"
EVENT_PATH = r"/events(/|$)"


def events(shell: Shell, reason: str | None = None) -> list[dict[str, Any]]:
    return [
        event
        for event in shell.server.items(*EVENTS, NAMESPACE)
        if reason is None or event["reason"] == reason
    ]


def event_calls(shell: Shell) -> list[str]:
    return [method for method, path in shell.server.calls if "/events" in path]


def skipping(shell: Shell, name: str) -> dict[str, Any]:
    """A per-second Forbid ScheduledJob whose first Job never finishes: after its first decision
    (which creates that Job), every decision skips one slot."""
    return shell.create(name, schedule="* * * * * *", concurrencyPolicy="Forbid")


async def seconds(shell: Shell, names: list[str], count: int) -> None:
    """`count` decisions of each ScheduledJob, one second apart (the first at `shell.now`)."""
    for _ in range(count):
        for name in names:
            assert (await shell.apply(name)).outcome is Outcome.DONE
        shell.now += timedelta(seconds=1)


def occur(shell: Shell, ref: ObjectRef, reason: str, times: int = 1, kind: str = "Normal") -> None:
    """What a decision's Event does in the applier, `times` times at `shell.now`."""
    for index in range(times):
        shell.applier.event(ref, kind, reason, f"occurrence {index}")


REF = ObjectRef(NAMESPACE, "report", "uid-report")


async def test_a_thousand_identical_skips_make_one_event_with_count_1000() -> None:
    shell = Shell()
    skipping(shell, "tick")
    await seconds(shell, ["tick"], 1001)  # the first decision creates the Job that blocks
    await shell.applier.drain()
    [forbid] = events(shell, FORBID)
    assert forbid["count"] == 1000
    assert forbid["type"] == "Normal"
    assert forbid["involvedObject"]["name"] == "tick"
    assert forbid["message"] == "skipped 1 slot(s) (ConcurrencyForbid); latest 2026-01-05T08:47:40Z"
    assert forbid["firstTimestamp"] == "2026-01-05T08:31:01.250Z"
    assert forbid["lastTimestamp"] == "2026-01-05T08:47:40.250Z"
    # Its first decision's Events, and this one: three objects in all, not 1,002.
    assert sorted(e["reason"] for e in events(shell)) == [
        FORBID,
        "SkippedSuperseded",
        "SuccessfulCreate",
    ]


async def test_occurrences_during_a_write_go_out_together_in_the_next() -> None:
    shell = Shell()
    release = asyncio.Event()
    shell.server.hold("POST", EVENT_PATH, release)
    occur(shell, REF, FORBID)
    await eventually(lambda: shell.server.held == 1)
    occur(shell, REF, FORBID, times=49)  # while the first write is in flight
    release.set()
    await shell.applier.drain()
    assert event_calls(shell) == ["POST", "PATCH"]
    [event] = events(shell)
    assert event["count"] == 50
    assert event["message"] == "occurrence 48"  # the latest


async def test_different_reasons_and_types_make_different_events_each_counted() -> None:
    shell = Shell()
    occur(shell, REF, "SuccessfulCreate", times=3)
    occur(shell, REF, FORBID, times=2)
    occur(shell, REF, FORBID, kind="Warning")
    await shell.applier.drain()
    counted = sorted((e["type"], e["reason"], e["count"]) for e in events(shell))
    assert counted == [
        ("Normal", FORBID, 2),
        ("Normal", "SuccessfulCreate", 3),
        ("Warning", FORBID, 1),
    ]
    assert len({e["metadata"]["name"] for e in events(shell)}) == 3


async def test_two_scheduledjobs_never_share_an_event() -> None:
    shell = Shell()
    skipping(shell, "a")
    skipping(shell, "b")
    await seconds(shell, ["a", "b"], 4)
    await shell.applier.drain()
    forbid = events(shell, FORBID)
    assert sorted((e["involvedObject"]["name"], e["count"]) for e in forbid) == [("a", 3), ("b", 3)]
    assert len({e["metadata"]["name"] for e in forbid}) == 2
    # A ScheduledJob deleted and made again under the same name is another object: a new Event.
    again = ObjectRef(NAMESPACE, "a", "another-uid")
    occur(shell, again, FORBID)
    await shell.applier.drain()
    by_uid = {e["involvedObject"]["uid"]: e["count"] for e in events(shell, FORBID)}
    assert len(by_uid) == 3
    assert by_uid["another-uid"] == 1


async def test_an_event_gone_when_patched_is_created_again() -> None:
    """Expired (the API server's event TTL) or deleted: the next occurrence creates it anew."""
    shell = Shell()
    occur(shell, REF, FORBID, times=1)
    await shell.applier.drain()
    occur(shell, REF, FORBID, times=1)
    await shell.applier.drain()
    [event] = events(shell)
    assert event["count"] == 2
    shell.server.remove(*EVENTS, NAMESPACE, event["metadata"]["name"])
    shell.now += timedelta(seconds=1)
    occur(shell, REF, FORBID, times=1)
    await shell.applier.drain()
    assert event_calls(shell)[-2:] == ["PATCH", "POST"]  # 404, then created
    [again] = events(shell)
    assert again["metadata"]["name"] == event["metadata"]["name"]
    assert again["count"] == 1  # a new object counts what happened since it was made
    assert again["firstTimestamp"] == "2026-01-05T08:31:01.250Z"


async def test_a_new_leader_continues_the_count_of_the_event_it_finds() -> None:
    """Its first POST meets AlreadyExists: it reads the Event and patches from its count."""
    shell = Shell()
    skipping(shell, "tick")
    await seconds(shell, ["tick"], 6)
    await shell.applier.drain()
    [before] = events(shell, FORBID)
    assert before["count"] == 5
    successor = shell.successor()
    calls = len(successor.server.calls)
    await seconds(successor, ["tick"], 3)
    await successor.applier.drain()
    [after] = events(successor, FORBID)
    assert after["count"] == 8
    assert after["firstTimestamp"] == before["firstTimestamp"]
    assert after["reportingInstance"] == "leader-a"  # the Event is the one leader-a made
    writes = [method for method, path in successor.server.calls[calls:] if "/events" in path]
    assert writes[:3] == ["POST", "GET", "PATCH"]  # 409 AlreadyExists, read, continued


async def test_a_concurrent_write_is_read_and_continued_not_overwritten() -> None:
    shell = Shell()
    occur(shell, REF, FORBID, times=2)
    await shell.applier.drain()
    [event] = events(shell)
    name = event["metadata"]["name"]
    shell.server.edit(*EVENTS, NAMESPACE, name, {"count": 40})  # another replica's write
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    assert event_calls(shell)[-3:] == ["PATCH", "GET", "PATCH"]  # 409 Conflict, read, again
    assert events(shell)[0]["count"] == 41


async def test_after_a_pause_longer_than_the_window_the_event_starts_anew() -> None:
    shell = Shell()
    occur(shell, REF, FORBID, times=3)
    await shell.applier.drain()
    first = events(shell)[0]
    shell.now += timedelta(minutes=9)  # within the window: the same series
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    assert events(shell)[0]["count"] == 4
    shell.now += timedelta(minutes=11)  # a pause longer than the window
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    [restarted] = events(shell)
    assert restarted["count"] == 1
    assert restarted["firstTimestamp"] == "2026-01-05T08:51:00.250Z"
    assert restarted["firstTimestamp"] != first["firstTimestamp"]
    assert restarted["metadata"]["name"] == first["metadata"]["name"]  # one Event per key


async def test_a_new_leader_starts_anew_an_event_last_written_before_the_window() -> None:
    shell = Shell()
    occur(shell, REF, FORBID, times=3)
    await shell.applier.drain()
    successor = shell.successor()
    successor.now += timedelta(minutes=11)
    occur(successor, REF, FORBID)
    await successor.applier.drain()
    [event] = events(successor)
    assert event["count"] == 1
    assert event["firstTimestamp"] == "2026-01-05T08:42:00.250Z"


async def test_a_failed_write_is_logged_and_its_count_goes_with_the_next() -> None:
    shell = Shell()
    shell.server.fail("POST", EVENT_PATH, 500)
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    assert events(shell) == []
    assert event_calls(shell) == ["POST"]  # no retry loop of its own
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    assert events(shell)[0]["count"] == 2


async def test_a_name_held_by_another_objects_event_is_left_alone() -> None:
    shell = Shell()
    name = event_name(REF, "Normal", FORBID)
    squatter = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "involvedObject": {"uid": "someone-else"},
        "type": "Normal",
        "reason": FORBID,
        "count": 7,
    }
    shell.server.put(squatter)
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    [event] = events(shell)
    assert (event["involvedObject"], event["count"]) == ({"uid": "someone-else"}, 7)


def test_event_names_fit_and_stay_valid() -> None:
    long = ObjectRef(NAMESPACE, "a" * 240 + "-b", "uid")
    name = event_name(long, "Normal", FORBID)
    assert len(name) <= MAX_NAME
    assert ".." not in name
    assert "-." not in name
    assert name == event_name(long, "Normal", FORBID)  # deterministic
    assert name != event_name(long, "Warning", FORBID)


async def test_memory_is_one_entry_per_key_dropped_when_idle_or_beyond_the_cap() -> None:
    shell = Shell()
    now = [0.0]
    recorder = EventRecorder(KubeApi(shell.server), lambda: "x", lambda: now[0], max_keys=3)
    for index in range(5):
        recorder.record(ObjectRef(NAMESPACE, f"sj{index}", f"uid{index}"), "Normal", FORBID, "")
        recorder.record(ObjectRef(NAMESPACE, f"sj{index}", f"uid{index}"), "Normal", FORBID, "")
    assert len(recorder) == 3  # the two oldest went
    now[0] = recorder.keep + 1
    recorder.record(REF, "Normal", FORBID, "")
    assert len(recorder) == 1  # the idle ones went


async def test_an_idle_series_keeps_no_text_and_shares_the_models_strings() -> None:
    """The recorder holds a series per key for an hour: at 5,000 ScheduledJobs, 10,000 of them
    at rest (design note 118). Once written, a series keeps neither the message nor a name of its
    own, and its ref's strings are the interned ones the model holds."""
    shell = Shell()
    uid = "".join(["uid-", "report"])  # built at run time: not the literal's interned copy
    interned = sys.intern("uid-report")
    occur(shell, ObjectRef(NAMESPACE, "report", uid), FORBID, times=2)
    await shell.applier.drain()
    [series] = shell.applier.events._series.values()
    assert (series.message, series.pending, series.count) == ("", 0, 2)
    assert series.ref.uid is interned
    assert not hasattr(series, "__dict__")
    assert events(shell)[0]["message"] == "occurrence 1"  # the text went out before it went


async def test_an_unreadable_first_timestamp_starts_the_series_anew() -> None:
    """Input someone else can write: an Event under our name whose firstTimestamp cannot be read
    is not continued (its count would be a count since an unknown time)."""
    shell = Shell()
    occur(shell, REF, FORBID, times=2)
    await shell.applier.drain()
    [event] = events(shell)
    name = event["metadata"]["name"]
    shell.server.edit(*EVENTS, NAMESPACE, name, {"count": 40, "firstTimestamp": "yesterday"})
    occur(shell, REF, FORBID)
    await shell.applier.drain()
    [after] = events(shell)
    assert after["count"] == 1
    assert after["firstTimestamp"] == "2026-01-05T08:31:00.250Z"
