"""The chaos auditor's audit of RunRequests (hack/chaos_requests.py): each flaw it must find,
planted in Jobs as the API server would show them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chaos_requests import MUST_BE_ZERO, Request, audit_requests
from chaos_runs import Seen, seen

NOW = 1_000.0  # the auditor's clock when it audits
UID = "req-uid-1"


def job(
    index: int,
    *,
    uid: str | None = None,
    request_uid: str = UID,
    attempt: int = 1,
    ended: str | None = "Complete",
    created: float = 100.0,
) -> dict[str, Any]:
    run = f"c0001-b{index}"
    labels = {
        "cronlease.io/scheduledjob": "c0001",
        "cronlease.io/trigger": "Backfill",
        "cronlease.io/request": "b1-c0001",
        "cronlease.io/run": run,
        "cronlease.io/attempt": str(attempt),
    }
    annotations = {
        "cronlease.io/scheduled-at": "2026-12-01T14:00:00Z",
        "cronlease.io/request-uid": request_uid,
        "cronlease.io/request-index": str(index),
    }
    conditions = [{"type": ended, "status": "True"}] if ended else []
    return {
        "metadata": {
            "name": run if attempt == 1 else f"{run}-a{attempt}",
            "uid": uid or f"{request_uid}/{index}/{attempt}",
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": datetime.fromtimestamp(created, UTC).isoformat(),
        },
        "status": {"conditions": conditions},
    }


def sighted(*jobs: dict[str, Any], at: float = 100.0) -> list[Seen]:
    found = [seen(obj, at) for obj in jobs]
    assert all(found)
    return [entry for entry in found if entry is not None]


def request(**fields: Any) -> Request:
    values: dict[str, Any] = {
        "uid": UID,
        "name": "b1-c0001",
        "scheduledjob": "c0001",
        "action": "Backfill",
        "policy": "Forbid",
        "created": 90.0,
        "phase": "Complete",
        "total": 3,
        "started": 3,
        "succeeded": 3,
    }
    return Request(**(values | fields))


def audit(requests: list[Request], jobs: list[Seen], held: tuple[Seen, ...] = ()) -> dict[str, Any]:
    return audit_requests(requests, jobs, held, NOW)


def test_a_complete_backfill_with_one_run_per_target_is_clean() -> None:
    result = audit([request()], sighted(job(0), job(1), job(2)))
    assert {key: result[key] for key in MUST_BE_ZERO} == dict.fromkeys(MUST_BE_ZERO, 0)
    assert result["backfills_complete"] == 1
    assert result["request_runs"] == 3
    assert result["request_targets_complete"] == 3


def test_a_target_with_two_runs_is_a_duplicate() -> None:
    jobs = sighted(job(0), job(1), job(1, uid="another"), job(2))
    assert audit([request()], jobs)["duplicated_targets"] == 1


def test_a_retry_of_a_target_is_no_second_run() -> None:
    jobs = sighted(job(0), job(1, ended="Failed"), job(1, attempt=2), job(2))
    result = audit([request()], jobs)
    assert result["duplicated_targets"] == 0
    assert result["request_retries"] == 1


def test_a_complete_request_missing_a_targets_run_is_found() -> None:
    assert audit([request()], sighted(job(0), job(2)))["complete_targets_without_run"] == 1


def test_a_complete_request_whose_counts_do_not_add_up_is_found() -> None:
    result = audit([request(succeeded=1, failed=1)], sighted(job(0), job(1), job(2)))
    assert result["complete_counts_wrong"] == 1


def test_runs_for_an_unknown_request_or_beyond_its_total_are_off_target() -> None:
    jobs = sighted(job(0), job(1), job(2), job(3), job(0, request_uid="someone-else"))
    assert audit([request()], jobs)["off_target_runs"] == 2


def test_a_target_started_after_the_cancellation_is_found_one_in_flight_is_not() -> None:
    cancelled = request(phase="Running", total=5, started=2, succeeded=1, deleted=200.0)
    jobs = sighted(job(0), job(1, created=201.0), job(2, created=205.0))
    result = audit([cancelled], jobs)
    assert result["started_after_cancel"] == 1
    assert result["started_in_flight_at_cancel"] == 1
    assert result["requests_cancelled"] == 1
    assert result["complete_targets_without_run"] == 0  # not Complete: nothing to account for


def test_an_ended_request_run_still_held_at_the_end_is_found_a_running_one_is_not() -> None:
    jobs = sighted(job(0), job(1), job(2, ended=None))
    result = audit([request()], jobs, held=(jobs[1], jobs[2]))
    assert result["request_runs_held_at_end"] == 1


def test_a_run_that_ended_just_before_the_audit_may_still_be_held() -> None:
    jobs = sighted(job(0), job(1), job(2), at=NOW - 1)
    assert audit([request()], jobs, held=(jobs[0],))["request_runs_held_at_end"] == 0


def test_a_request_keeps_the_latest_status_it_was_seen_with() -> None:
    watched = request(phase="", total=None, started=0, succeeded=0)
    watched.observe({"status": {"phase": "Running", "total": 4, "started": 2, "succeeded": 1}})
    watched.observe({"status": {"phase": "Running", "total": 4, "started": "9"}})  # not a count
    assert (watched.phase, watched.total, watched.started, watched.succeeded) == (
        "Running",
        4,
        2,
        1,
    )


def test_a_skipped_target_needs_no_run_and_must_have_none() -> None:
    """A replay skips a target another request replays (issue 33): it has no run, and
    succeeded + failed + skipped is the total."""
    skipping = request(succeeded=2, skipped={1})
    assert audit([skipping], sighted(job(0), job(2)))["complete_targets_without_run"] == 0
    assert audit([skipping], sighted(job(0), job(2)))["complete_counts_wrong"] == 0
    assert audit([skipping], sighted(job(0), job(1), job(2)))["complete_counts_wrong"] == 1
    assert audit([request(skipped={1})], sighted(job(0), job(2)))["complete_counts_wrong"] == 1


def test_a_request_takes_its_skipped_targets_from_its_status() -> None:
    seen_request = request(phase="Running", succeeded=0)
    seen_request.observe({"status": {"phase": "Complete", "skippedIndexes": "0-1,x"}})
    assert seen_request.skipped == {0, 1}


def test_a_dead_letter_two_requests_replayed_is_found() -> None:
    """Issue 33: two `replay --dead-letters` while the first runs must not both run a run."""
    first = request(uid="r1", name="r1-c0001", action="Replay", total=1, started=1, succeeded=1)
    second = request(uid="r2", name="r2-c0001", action="Replay", total=1, started=1, succeeded=1)
    for replay in (first, second):
        replay.observe({"status": {"targets": [{"run": "c0001-dead", "slot": "x"}]}})
    twice = audit([first, second], sighted(job(0, request_uid="r1"), job(0, request_uid="r2")))
    assert twice["runs_replayed_twice"] == 1
    second.skipped = {0}
    once = audit([first, second], sighted(job(0, request_uid="r1")))
    assert once["runs_replayed_twice"] == 0
    assert once["runs_replayed"] == 1
