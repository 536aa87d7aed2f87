"""The kubectl plugin's pure parts other than the ledger: `next` (firing), CronJob translation and
its differences, windows and names, what the API objects say (evidence, views), the output, and
the command line's one-line errors. No cluster, and no `kubernetes` client: it is not installed
here (the operator's environment), and nothing below needs it."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronlease.core.names.serverdate import ServerDate
from cronlease.core.schedule.cron import Schedule
from cronlease.kubectl.cli import main
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.evidence import gather, subject_of
from cronlease.kubectl.firing import next_firings
from cronlease.kubectl.ledger import Verdict, build_ledger
from cronlease.kubectl.output import Progress, age, colour, relative, table
from cronlease.kubectl.translate import translate
from cronlease.kubectl.views import dead_letters, history, leader, request_progress
from cronlease.kubectl.window import check_name, parse_instant, parse_window

NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)


# --- next ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00:00Z",
            [("2026-03-29T01:00:00+00:00", "spring-forward")],
            id="spring-forward-gap-fires-at-the-transition",
        ),
        pytest.param(
            "0 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:30:00Z",
            [("2026-10-25T00:00:00+00:00", "fall-back"), ("2026-10-25T02:00:00+00:00", "")],
            id="fall-back-repeat-fires-once",
        ),
        pytest.param(
            "*/15 * * * *",
            "UTC",
            "2026-12-01T12:00:00Z",
            [("2026-12-01T12:15:00+00:00", ""), ("2026-12-01T12:30:00+00:00", "")],
            id="utc-has-no-notes",
        ),
    ],
)
def test_next_firings_and_their_dst_notes(
    expression: str, zone: str, after: str, expected: list[tuple[str, str]]
) -> None:
    start = datetime.fromisoformat(after.replace("Z", "+00:00"))
    firings = next_firings(Schedule.parse(expression, zone), start, len(expected))
    assert [(f.slot.isoformat(), f.note.split(":")[0]) for f in firings] == expected


# --- CronJob translation -----------------------------------------------------------------------


def cronjob(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "nightly",
            "namespace": "team",
            "uid": "u1",
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "a": "b"},
            "labels": {"team": "x"},
        },
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {"metadata": {"labels": {"l": "v"}}, "spec": {"template": {}}},
            **spec,
        },
        "status": {"lastScheduleTime": "2026-12-01T11:55:00Z"},
    }


def test_translation_keeps_the_name_and_starts_after_the_last_slot() -> None:
    adoption = translate(cronjob(concurrencyPolicy="Forbid", successfulJobsHistoryLimit=5), NOW)
    manifest = adoption.manifest
    assert manifest["metadata"]["name"] == "nightly"  # the same Job names: one Job per slot
    # No start point in the manifest: only adopt writes one, as it creates the object.
    assert manifest["metadata"]["annotations"] == {
        "a": "b",
        "cronlease.io/adopted-from": "cronjob/nightly",
    }
    assert manifest["spec"] == {
        "schedule": "*/5 * * * *",
        "timeZone": "UTC",
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": 5,
        "jobTemplate": {"spec": {"template": {}}, "metadata": {"labels": {"l": "v"}}},
    }
    assert adoption.start_after == datetime(2026, 12, 1, 11, 55, tzinfo=UTC)


@pytest.mark.parametrize(
    ("job_slot", "start", "since"),
    [
        (None, "2026-12-01T11:55:00Z", "lastScheduleTime 2026-12-01T11:55:00Z"),
        ("2026-12-01T12:00:00Z", "2026-12-01T12:00:00Z", "its latest Job's slot"),
        ("2026-12-01T11:50:00Z", "2026-12-01T11:55:00Z", "lastScheduleTime 2026-12-01T11:55:00Z"),
    ],
)
def test_the_start_is_the_later_of_the_status_and_the_latest_job(
    job_slot: str | None, start: str, since: str
) -> None:
    """Not capped by "now": the operator caps it at the object's creation (the server's clock)."""
    later = datetime.fromisoformat(job_slot) if job_slot else None
    adoption = translate(cronjob(), NOW - timedelta(hours=1), job_slot=later)
    assert adoption.start_after == datetime.fromisoformat(start)
    missed = next(d for d in adoption.differences if d.startswith("missed slots"))
    assert f"since {since}" in missed


def test_the_server_clock_reads_date_headers_on_the_monotonic_clock() -> None:
    ticks = iter([100.0, 100.4, 130.0, 160.0])
    clock = ServerDate(lambda: next(ticks))
    assert clock.server_now() is None  # no answer yet
    clock.observe("Tue, 01 Dec 2026 12:00:30 GMT")  # read at 100.0
    clock.observe("Tue, 01 Dec 2026 12:00:30 GMT")  # the same second again: the first reading
    clock.observe("not a date")
    clock.observe(None)
    assert clock.server_now() == datetime(2026, 12, 1, 12, 0, 30, 400000, tzinfo=UTC)  # at 100.4
    clock.observe("Tue, 01 Dec 2026 12:01:00 GMT")  # read at 130.0
    assert clock.server_now() == datetime(2026, 12, 1, 12, 1, 30, tzinfo=UTC)  # at 160.0


def _topics(differences: tuple[str, ...]) -> list[str]:
    return [d.split(":")[0] for d in differences]


@pytest.mark.parametrize(
    ("spec", "present", "absent"),
    [
        pytest.param(
            {}, ["time zone", "missed slots"], ["DST", "deadline 0", "Forbid racing"], id="plain"
        ),
        pytest.param(
            {"timeZone": "Europe/Berlin", "schedule": "30 2 * * *"},
            ["DST"],
            ["time zone"],
            id="dst-zone-and-a-time-in-the-gap",
        ),
        pytest.param(
            {"timeZone": "Europe/Berlin", "schedule": "0 12 * * *"},
            [],
            ["DST"],
            id="dst-zone-but-never-near-the-change",
        ),
        pytest.param({"startingDeadlineSeconds": 0}, ["deadline 0"], [], id="deadline-0"),
        pytest.param({"concurrencyPolicy": "Forbid"}, ["Forbid racing"], [], id="forbid"),
        pytest.param({"suspend": True}, ["suspended"], ["missed slots"], id="suspended"),
    ],
)
def test_the_differences_that_apply(
    spec: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    topics = _topics(translate(cronjob(**spec), NOW).differences)
    for topic in present:
        assert topic in topics
    for topic in absent:
        assert topic not in topics


def test_the_missed_slot_estimate_counts_exactly() -> None:
    job = cronjob()
    job["status"]["lastScheduleTime"] = "2026-12-01T11:00:00Z"  # 12:00:30 now: 11:05 .. 12:00
    (missed,) = [d for d in translate(job, NOW).differences if d.startswith("missed slots")]
    assert "missed slots: 12 since" in missed
    assert "the latest 2026-12-01T12:00:00Z" in missed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"schedule": "TZ=Europe/Berlin 0 9 * * *"}, "carries a time zone", id="tz"),
        pytest.param({"schedule": "@every 90s"}, "counts from the object's creation", id="every"),
        pytest.param({"schedule": "0 0 30 2 *"}, "never fires", id="never"),
        pytest.param({"schedule": "1,,2 * * * *"}, "reads it differently", id="robfig-accident"),
        pytest.param({"schedule": ""}, "spec.schedule is missing", id="empty"),
        pytest.param({"timeZone": "Mars/Olympus"}, "timeZone", id="zone"),
        pytest.param({"jobTemplate": None}, "jobTemplate", id="template"),
    ],
)
def test_a_cronjob_cronlease_would_read_differently_is_refused(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(PluginError, match=message):
        translate(cronjob(**spec), NOW)


# --- windows and names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T09:00:00Z", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01T10:00:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("now", NOW),
        ("90m", NOW - timedelta(minutes=90)),
        ("2d", NOW - timedelta(days=2)),
    ],
)
def test_instants_as_users_type_them(text: str, expected: datetime) -> None:
    assert parse_instant(text, NOW, "--from") == expected


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [
        ("yesterday", "now", "--from: 'yesterday' is not a time"),
        ("now", "2h", r"--to \(2h\) is before --from"),
        ("1960-01-01", "now", "outside 1970..2286"),
        ("1h", "2026-13-01", "--to: '2026-13-01' is not a time"),
    ],
)
def test_bad_windows(low: str, high: str, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        parse_window(low, high, NOW)


@pytest.mark.parametrize("name", ["Bad", "-x", "a_b", "x" * 254, "", "../etc"])
def test_bad_names(name: str) -> None:
    with pytest.raises(PluginError, match="invalid name"):
        check_name(name)


# --- evidence: what the objects say --------------------------------------------------------------

UID = "sj-uid"


def scheduled_job(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "sj",
            "namespace": "ns",
            "uid": UID,
            "creationTimestamp": "2026-12-01T11:50:10Z",
            "annotations": {},
        },
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}},
        "status": {"observedSchedule": "schedule=* * * * *;timeZone=UTC", **status},
    }


def job(name: str, slot: str, **extra: Any) -> dict[str, Any]:
    """A Job as the leader writes it (cronlease.core.names.jobinfo's `trusted`)."""
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "creationTimestamp": slot,
            "labels": {"cronlease.io/scheduledjob": "sj", **extra.get("labels", {})},
            "annotations": {
                "cronlease.io/scheduled-at": slot,
                "cronlease.io/trigger": "Schedule",
                "cronlease.io/leader": extra.get("leader", "op-1"),
                "cronlease.io/fencing-token": extra.get("token", "3"),
            },
            "ownerReferences": [
                {
                    "apiVersion": "cronlease.io/v1alpha1",
                    "kind": "ScheduledJob",
                    "name": "sj",
                    "uid": UID,
                    "controller": True,
                }
            ],
        },
        "status": extra.get("status", {"conditions": [{"type": "Complete", "status": "True"}]}),
    }


def minute_job(minute: int) -> dict[str, Any]:
    slot = datetime(2026, 12, 1, 11, minute, tzinfo=UTC)
    return job(f"sj-{int(slot.timestamp()) // 60}", slot.strftime("%Y-%m-%dT%H:%M:%SZ"))


def test_evidence_from_jobs_recent_runs_and_skip_events() -> None:
    obj = scheduled_job(
        processedUntil="2026-12-01T11:56:00Z",
        runsCreated=4,
        slotsSkipped={"ConcurrencyForbid": 1},
        recentRuns=[
            {
                "slot": "2026-12-01T11:52:00Z",
                "job": "sj-29935432",
                "trigger": "Schedule",
                "result": "Succeeded",
            }
        ],
    )
    jobs = [minute_job(51), minute_job(53), minute_job(55), {"metadata": "garbage"}]
    events = [
        {
            "involvedObject": {"kind": "ScheduledJob", "uid": UID},
            "reason": "SkippedConcurrencyForbid",
            "message": "skipped 1 slot(s) (ConcurrencyForbid); latest 2026-12-01T11:54:00Z",
        },
        {
            "involvedObject": {"kind": "ScheduledJob", "uid": "other"},
            "reason": "SkippedSuspended",
            "message": "skipped 1 slot(s) (Suspended); latest 2026-12-01T11:56:00Z",
        },
    ]
    low, high = datetime(2026, 12, 1, 11, 51, tzinfo=UTC), datetime(2026, 12, 1, 11, 58, tzinfo=UTC)
    facts = gather(subject_of(obj), jobs, events, low, high, NOW)
    ledger = build_ledger(facts).within(low, high)
    assert [e.verdict for e in ledger.entries] == [
        Verdict.RAN,
        Verdict.RAN,
        Verdict.RAN,
        Verdict.SKIPPED,
        Verdict.RAN,
        Verdict.MISSING,
        Verdict.DUE,
        Verdict.DUE,
    ]
    assert facts.start == datetime(2026, 12, 1, 11, 50, 10, tzinfo=UTC)


def test_a_cronjob_it_took_over_from_counts_and_a_schedule_edit_moves_the_start() -> None:
    obj = scheduled_job(processedUntil="2026-12-01T11:55:00Z")
    obj["metadata"]["annotations"] = {"cronlease.io/adopted-from": "cronjob/sj"}
    cron_job = {
        "metadata": {
            "name": "sj-29935431",  # 11:51, by its name (no annotation)
            "ownerReferences": [{"kind": "CronJob", "name": "sj", "uid": "c", "controller": True}],
        }
    }
    events = [
        {
            "involvedObject": {"kind": "ScheduledJob", "uid": UID},
            "reason": "ScheduleChanged",
            "message": "schedule is now * * * * * (UTC); slots before 2026-12-01T11:53:30Z "
            "will not run",
        }
    ]
    low, high = datetime(2026, 12, 1, 11, 51, tzinfo=UTC), datetime(2026, 12, 1, 11, 55, tzinfo=UTC)
    facts = gather(subject_of(obj), [cron_job, minute_job(54)], events, low, high, NOW)
    ledger = build_ledger(facts).within(low, high)
    assert [(e.verdict, e.detail) for e in ledger.entries] == [
        (Verdict.RAN, "sj-29935431 (cronjob/sj) Active"),
        (Verdict.BEFORE, ""),
        (Verdict.BEFORE, ""),
        (Verdict.RAN, "sj-29935434 Succeeded"),
        (Verdict.MISSING, "no run, no skip counted"),
    ]


@pytest.mark.parametrize(
    ("adopted_after", "first"), [("2026-12-01T11:50:00Z", Verdict.MISSING), (None, Verdict.BEFORE)]
)
def test_an_adopted_scheduled_job_starts_where_the_cronjob_stopped(
    adopted_after: str | None, first: Verdict
) -> None:
    """Created at 11:52:30 with its cursor seeded at 11:50: 11:51 was cronlease's to run (or
    record), even after adopt removed cronlease.io/start-after."""
    obj = scheduled_job(processedUntil="2026-12-01T11:53:00Z")
    obj["metadata"]["creationTimestamp"] = "2026-12-01T11:52:30Z"
    obj["metadata"]["annotations"] = {"cronlease.io/adopted-from": "cronjob/sj"}
    if adopted_after:
        obj["metadata"]["annotations"]["cronlease.io/adopted-after"] = adopted_after
    low, high = datetime(2026, 12, 1, 11, 51, tzinfo=UTC), datetime(2026, 12, 1, 11, 53, tzinfo=UTC)
    facts = gather(subject_of(obj), [minute_job(52), minute_job(53)], [], low, high, NOW)
    verdicts = [e.verdict for e in build_ledger(facts).within(low, high).entries]
    assert verdicts == [first, Verdict.RAN, Verdict.RAN]


def test_an_invalid_scheduled_job_is_one_line() -> None:
    obj = scheduled_job()
    obj["spec"]["schedule"] = "61 * * * *"
    with pytest.raises(PluginError, match=r"^scheduledjob/sj: invalid: spec.schedule"):
        subject_of(obj)


# --- views ---------------------------------------------------------------------------------------


def test_history_merges_recent_runs_with_the_jobs() -> None:
    obj = scheduled_job(
        recentRuns=[
            {
                "slot": "2026-12-01T11:53:00Z",
                "job": "sj-29935433",
                "trigger": "Schedule",
                "result": "Succeeded",
                "lagSeconds": 0.25,
            },
            {"slot": "bad", "job": "x"},
        ]
    )
    rows = history(obj, [minute_job(51), minute_job(53)])
    assert [(r.run, r.result, r.lag_seconds) for r in rows] == [
        ("sj-29935431", "Succeeded", None),
        ("sj-29935433", "Succeeded", 0.25),
    ]


def test_dead_letters_are_the_labelled_jobs() -> None:
    failed = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "lastTransitionTime": "2026-12-01T11:52:09Z",
            }
        ]
    }
    letter = job(
        "sj-29935431",
        "2026-12-01T11:51:00Z",
        status=failed,
        labels={"cronlease.io/dead-letter": "true"},
    )
    replayed = job(
        "sj-29935432",
        "2026-12-01T11:52:00Z",
        status=failed,
        labels={"cronlease.io/dead-letter": "replayed"},
    )
    (row,) = dead_letters([letter, replayed, minute_job(53)])
    assert (row.scheduled_job, row.run, row.reason, row.failed_at) == (
        "sj",
        "sj-29935431",
        "BackoffLimitExceeded",
        "2026-12-01T11:52:09Z",
    )


def test_leader_names_the_holder_its_token_and_every_writer_seen() -> None:
    lease = {
        "metadata": {"name": "cronlease-leader", "namespace": "cronlease-system"},
        "spec": {
            "holderIdentity": "op-2",
            "leaseTransitions": 4,
            "acquireTime": "2026-12-01T11:00:00Z",
        },
    }
    jobs = [
        job("a", "2026-12-01T11:51:00Z", leader="op-1", token="3"),
        job("b", "2026-12-01T11:52:00Z", leader="op-2", token="4"),
        job("c", "2026-12-01T11:53:00Z", leader="op-2", token="x"),
    ]
    view = leader(lease, jobs, [{"metadata": {"name": "cronlease-abc"}}])
    assert (view.holder, view.token, view.since) == ("op-2", 4, "2026-12-01T11:00:00Z")
    assert [(r.identity, r.token, r.jobs, r.holds_lease) for r in view.replicas] == [
        ("op-1", 3, 1, False),
        ("op-2", 4, 2, True),
    ]
    assert view.pods == ("cronlease-abc",)


# --- output --------------------------------------------------------------------------------------


def test_a_table_as_kubectl_prints_it() -> None:
    text = table(["NAME", "AGE"], [["a", "5m"], ["longer", "2d"]])
    assert text == "NAME     AGE\na        5m\nlonger   2d"


def test_colour_only_when_enabled() -> None:
    assert colour("x", "red", False) == "x"
    assert colour("x", "red", True) == "\033[31mx\033[0m"
    rows = table(["A"], [["x"]], ["red"], enabled=False)
    assert "\033" not in rows


@pytest.mark.parametrize(
    ("seconds", "expected"), [(5, "5s"), (119, "119s"), (120, "2m"), (7200, "2h"), (172800, "2d")]
)
def test_ages(seconds: int, expected: str) -> None:
    assert age(NOW - timedelta(seconds=seconds), NOW) == expected
    assert relative(NOW + timedelta(seconds=seconds), NOW) == f"in {expected}"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    plain, terminal = io.StringIO(), Terminal()
    for stream in (plain, terminal):
        progress = Progress(stream)
        progress.update("waiting for the operator")
        progress.done()
    assert plain.getvalue() == ""
    assert terminal.getvalue().startswith("\r\033[K| waiting for the operator (0s)")
    assert terminal.getvalue().endswith("\r\033[K")


# --- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["next", "--schedule", "61 * * * *"], 1, "error: invalid: schedule: invalid minute field"),
        (["next", "--schedule", "* * * * *", "--tz", "Nowhere/City"], 1, "error: invalid:"),
        (["next", "--schedule", "* * * * *", "-c", "0"], 1, "error: -c: must be 1 to 1000"),
        (["next", "--schedule", "* * * * *", "--from", "soon"], 1, "error: --from: 'soon'"),
        (["audit"], 1, "error: give a ScheduledJob's name, or -A"),
        (["audit", "x", "--from", "2h", "--to", "3h"], 1, "error: --to (3h) is before --from"),
        (["adopt", "deployment/x", "--dry-run"], 1, "error: adopt takes cronjob/NAME"),
        (["history", "Bad_Name"], 1, "error: invalid name 'Bad_Name'"),
        (["frobnicate"], 2, "error: argument command: invalid choice"),
        (["next", "--schedule", "* * * * *", "--timeout", "0"], 1, "error: --timeout"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    argv: list[str],
    code: int,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No cluster is reached: each of these fails before any API call (the client is not even
    # installed here, and its absence is its own one-line error).
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == code
    assert captured.err.startswith(message), captured.err
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


def test_next_works_without_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "next",
                "--schedule",
                "0 9 * * 1-5",
                "--tz",
                "Europe/Berlin",
                "-c",
                "3",
                "--from",
                "2026-12-04T09:00:00Z",
            ]
        )
    out = capsys.readouterr().out.splitlines()
    assert exit_info.value.code == 0
    assert out[0] == "schedule: 0 9 * * 1-5   timeZone: Europe/Berlin"
    assert out[1].startswith("DST rule: each wall-clock time fires once")
    assert [line.split()[:2] for line in out[3:]] == [
        ["2026-12-07", "09:00:00"],
        ["2026-12-08", "09:00:00"],
        ["2026-12-09", "09:00:00"],
    ]


def test_request_progress_counts_the_targets_another_request_replays() -> None:
    status = {"phase": "Complete", "total": 3, "started": 3, "succeeded": 1, "skipped": 2}
    state = request_progress({"metadata": {"name": "again-2"}, "status": status})
    assert (state.succeeded, state.failed, state.skipped, state.finished) == (1, 0, 2, True)
    assert request_progress({"status": {"skipped": "two"}}).skipped == 0
