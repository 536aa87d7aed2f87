"""Property-based tests (hypothesis) of decide(): random sequences of "now" fed to decide(), the
status written back and the created Jobs added to the live model each time, as the shell does;
bookkeeping invariants are checked throughout. Schedules and instants come from timerule.py.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from builders import after_apply, condition, job_template, names, view
from hypothesis import assume, event, example, given
from hypothesis import strategies as st
from timerule import SECOND, ZONES, crons, instants, parse, properties

from cronlease.core.decide.decision import Decision, PlannedRun, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.slots import ON_TIME_TOLERANCE
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    format_time,
    parse_time,
)
from cronlease.core.schedule.cron import Schedule

# --- decide() ---------------------------------------------------------------------------------

POLICIES = ["Allow", "Forbid", "Replace", "BufferOne", "BufferAll", "CancelOther"]
NO_OVERLAP = {"BufferOne", "BufferAll", "CancelOther"}  # not even with a Job being deleted
DEADLINES = [None, 0, 1, 5, 30, 120, 3600]


@st.composite
def decide_schedules(draw: st.DrawFn) -> str:
    """Schedules dense enough that a few 0-300 s steps cross several slots."""
    kind = draw(st.sampled_from(["every-n-seconds", "every-n-minutes", "cron"]))
    if kind == "every-n-seconds":
        return f"*/{draw(st.sampled_from([1, 2, 5, 10, 15, 30, 45]))} * * * * *"
    if kind == "every-n-minutes":
        return f"*/{draw(st.integers(1, 20))} * * * *"
    return draw(crons(seconds=draw(st.booleans()))).expression


@dataclasses.dataclass(frozen=True)
class Step:
    wait: float | None  # seconds until the next decision; None: at the decision's wake_at
    lag: float  # how late the loop wakes up after wake_at
    finish: float  # the share of active Jobs that finish before it
    failed: bool
    toggle_suspend: bool
    run_now: bool


steps_strategy = st.lists(
    st.builds(
        Step,
        wait=st.one_of(st.none(), st.just(0.0), st.floats(0, 300), st.integers(0, 300).map(float)),
        lag=st.sampled_from([0.0, 0.001, 0.2, 0.9, 1.5]),
        finish=st.sampled_from([0.0, 0.5, 1.0]),
        failed=st.booleans(),
        toggle_suspend=st.integers(0, 5).map(lambda n: n == 0),
        run_now=st.integers(0, 6).map(lambda n: n == 0),
    ),
    min_size=3,
    max_size=25,
)


def finish_some(jobs: list[JobInfo], share: float, failed: bool, now: datetime) -> list[JobInfo]:
    """The Job controller's part: the first `share` of the active Jobs end at `now`."""
    active = [job for job in jobs if job.state is JobState.ACTIVE]
    ending = {job.uid for job in active[: int(len(active) * share)]}
    state = JobState.FAILED if failed else JobState.SUCCEEDED
    return [
        dataclasses.replace(job, state=state, started_at=job.created_at, finished_at=now)
        if job.uid in ending
        else job
        for job in jobs
    ]


def vanish_some(jobs: list[JobInfo], share: float) -> list[JobInfo]:
    """The garbage collector's part: the first `share` of the Jobs being deleted are gone."""
    deleting = [job.uid for job in jobs if job.deleting]
    gone = set(deleting[: int(len(deleting) * share)])
    return [job for job in jobs if job.uid not in gone]


@properties(300)
@given(
    data=st.data(),
    zone_name=st.sampled_from(ZONES),
    policy=st.sampled_from(POLICIES),
    catch_up=st.sampled_from([None, "Latest", "All"]),
    buffer_limit=st.integers(1, 4),
    jitter_share=st.sampled_from([0.0, 0.0, 0.5, 0.99]),
    deadline=st.sampled_from(DEADLINES),
    suspend=st.integers(0, 3).map(lambda n: n == 3),
    limits=st.tuples(st.integers(0, 3), st.integers(0, 2)),
    one_off=st.integers(0, 9).map(lambda n: n == 0),
    steps=steps_strategy,
)
def test_decide_runs_or_records_every_slot_exactly_once(
    data: st.DataObject,
    zone_name: str,
    policy: str,
    catch_up: str | None,
    buffer_limit: int,
    jitter_share: float,
    deadline: int | None,
    suspend: bool,
    limits: tuple[int, int],
    one_off: bool,
    steps: list[Step],
) -> None:
    created = data.draw(instants(zone_name, near=timedelta(hours=2)), label="created")
    created = created.replace(microsecond=0)  # creationTimestamp has whole seconds
    raw: dict[str, Any] = {
        "timeZone": zone_name,
        "concurrencyPolicy": policy,
        "suspend": suspend,
        "successfulJobsHistoryLimit": limits[0],
        "failedJobsHistoryLimit": limits[1],
        "jobTemplate": job_template(),
    }
    if deadline is not None:
        raw["startingDeadlineSeconds"] = deadline
    if catch_up is not None:
        raw["catchUp"] = catch_up
    if policy == "BufferAll":
        raw["bufferLimit"] = buffer_limit
    jitter_seconds = 0
    run_at: datetime | None = None
    schedule: Schedule | None = None
    if one_off:
        run_at = created + timedelta(seconds=data.draw(st.integers(-600, 3000), label="runAt"))
        raw["runAt"] = run_at.isoformat()
    else:
        raw["schedule"] = data.draw(decide_schedules(), label="schedule")
        schedule = parse(raw["schedule"], zone_name)
        jitter_seconds = int(jitter_share * schedule.shortest_gap.total_seconds())
        raw["jitterSeconds"] = jitter_seconds
    sj: ScheduledJobView = view(raw, created_at=created)
    jobs: list[JobInfo] = []
    now = created + timedelta(seconds=data.draw(st.floats(0, 300), label="first wait"))
    run_slots: list[datetime] = []
    job_names: set[str] = set()
    tokens_run: list[str] = []
    skipped_in_decisions = 0
    cursor: datetime | None = None

    for index, step in enumerate(steps):
        waiting = set(parse_time(entry) for entry in sj.status.get("buffered") or [])
        decision = decide(sj, jobs, now)
        assert not decision.recorded, "the model holds every created Job: nothing to re-record"
        for run in decision.runs:
            assert run.job_name not in job_names, f"a second Job named {run.job_name}"
            job_names.add(run.job_name)
            if run.trigger == TRIGGER_MANUAL:
                assert run.run_now_token is not None
                tokens_run.append(run.run_now_token)
                continue
            assert run.trigger == TRIGGER_SCHEDULE
            assert run.slot <= now
            if cursor is not None and run.slot <= cursor:
                assert run.slot in waiting, "a slot at or before processedUntil ran, not buffered"
            if deadline is not None:
                late = now - run.slot - timedelta(seconds=jitter_seconds)
                assert late <= timedelta(seconds=deadline) + ON_TIME_TOLERANCE
            if schedule is not None:
                # the slot is a slot of the schedule
                assert schedule.slots_between(run.slot - SECOND, run.slot) == [run.slot]
            else:
                assert run.slot == run_at
            run_slots.append(run.slot)
        skipped_in_decisions += sum(skip.count for skip in decision.skips)
        assert len(run_slots) == len(set(run_slots)), "two runs for one slot"
        assert len(tokens_run) == len(set(tokens_run)), "two manual runs for one token"

        cancelled = {
            deletion.uid for deletion in decision.deletions if deletion.reason == "CancelOther"
        }
        # CancelOther deletes in the foreground: the Job stays, deleting, until its pods are gone.
        lingering = [
            dataclasses.replace(job, deleting=True) for job in jobs if job.uid in cancelled
        ]
        sj, jobs = after_apply(sj, jobs, decision)
        jobs += lingering
        processed = parse_time(sj.status.get("processedUntil"))
        if cursor is not None:
            assert processed is not None
            assert processed >= cursor, "processedUntil went back"
        cursor = processed
        if policy != "Allow":
            active = [job for job in jobs if job.state is JobState.ACTIVE and not job.deleting]
            assert len(active) <= 1, f"{policy}: {[job.name for job in active]}"
        if policy in NO_OVERLAP:
            running = [job for job in jobs if job.state is JobState.ACTIVE]
            assert len(running) <= 1, f"{policy}: {[job.name for job in running]}"
        buffered = sj.status.get("buffered") or []
        if buffered:
            event(f"{policy}: slots waited in the buffer")
        if lingering:
            event("CancelOther: a deleted run lingered")
        limit = {"BufferOne": 1, "BufferAll": buffer_limit, "CancelOther": 1}.get(policy, 0)
        assert len(buffered) <= limit, (policy, buffered)

        if index == len(steps) - 1:
            break
        jobs = vanish_some(finish_some(jobs, step.finish, step.failed, now), step.finish)
        if step.toggle_suspend:
            spec = {**sj.spec, "suspend": not sj.spec.get("suspend", False)}
            sj = dataclasses.replace(sj, spec=spec, generation=sj.generation + 1)
        if step.run_now:
            annotations = {ANNOTATION_RUN_NOW: f"token-{index}"}
            sj = dataclasses.replace(sj, annotations=annotations)
        if step.wait is not None:
            now += timedelta(seconds=step.wait)
        elif decision.wake_at is not None:  # as the shell does: sleep until wake_at
            now = max(now, min(decision.wake_at, now + timedelta(seconds=300)))
            now += timedelta(seconds=step.lag)

    status = sj.status
    skipped = sum((status.get("slotsSkipped") or {}).values())
    assert skipped == skipped_in_decisions
    assert status["runsCreated"] == len(job_names)
    buffered = len(status.get("buffered") or [])
    if schedule is not None:
        processed = parse_time(status.get("processedUntil")) or created
        expected = schedule.count_between(created, processed)
        # Only the newest slot may wait for its jitter, beyond the cursor.
        assert schedule.count_between(processed, now) <= (1 if jitter_seconds else 0)
    else:
        assert run_at is not None
        expected = 1 if run_at <= now else 0
    accounted = len(run_slots) + skipped + buffered
    assert accounted == expected, (run_slots, status.get("slotsSkipped"), buffered)
    event(f"{'some' if run_slots else 'no'} scheduled runs")
    event(f"slots due in total: {'0' if not expected else '1-9' if expected < 10 else '10+'}")
    event(f"{'some' if tokens_run else 'no'} manual runs")
    for reason in status.get("slotsSkipped") or {}:
        event(f"slots skipped: {reason}")


# --- runAt: any instant the API server's date-time format accepts -----------------------------

NOW = datetime(2026, 1, 5, 8, 30, tzinfo=UTC)
LABEL_VALUE_MAX = 63  # a Job's name becomes the value of its pods' job-name label
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A runAt's Job is named `<name>-<epoch seconds>`: 52 + 1 + 10 characters fit a label value only
# for instants from the epoch to the last second with ten digits. The operator refuses the rest.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST_TEN_DIGIT_SECOND = datetime(2286, 11, 20, 17, 46, 39, tzinfo=UTC)
RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:Z|([+-])(\d\d):(\d\d))"
)


@st.composite
def rfc3339(draw: st.DrawFn, low: date, high: date) -> str:
    """An RFC 3339 date-time with an offset, as the CRD's `format: date-time` accepts it, often
    with a fraction of 1 to 9 digits (finer than the milliseconds the operator stores)."""
    day, clock = draw(st.dates(low, high)), draw(st.times())
    minutes = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    sign, size = ("-" if minutes < 0 else "+"), abs(minutes)
    offset = f"{sign}{size // 60:02d}:{size % 60:02d}"
    if minutes == 0 and draw(st.booleans()):
        offset = "Z"
    digits = draw(st.integers(0, 9))
    fraction = f".{draw(st.integers(0, 10**digits - 1)):0{digits}d}" if digits else ""
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}T{clock:%H:%M:%S}{fraction}{offset}"


def instant_of(text: str) -> datetime | None:
    """The UTC instant an RFC 3339 text names, cut to the milliseconds the operator stores, by
    arithmetic on its fields (not the operator's parser); None when it lies outside the years
    1-9999 that a datetime can hold."""
    match = RFC3339.fullmatch(text)
    assert match is not None, text
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    micro = int((match.group(7) or "0")[:3].ljust(3, "0")) * 1000
    offset = timedelta(hours=int(match.group(9) or 0), minutes=int(match.group(10) or 0))
    wall = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    try:
        return wall - offset if match.group(8) != "-" else wall + offset
    except OverflowError:
        return None


def run_at_decisions(name: str, run_at: str) -> tuple[Decision, Decision]:
    """Two consecutive decisions, at NOW and a second later (the second sees the first's status
    and the Jobs it created)."""
    raw = {"runAt": run_at, "jobTemplate": job_template()}
    sj = view(raw, name=name, created_at=NOW - timedelta(hours=1))
    first = decide(sj, [], NOW)
    sj, jobs = after_apply(sj, [], first)
    second = decide(sj, jobs, NOW + SECOND)
    return first, second


def check_run_at(name: str, run_at: str) -> list[PlannedRun]:
    """What a one-off promises, whatever instant the API server let through: an instant whose Job
    name could not be a label value is refused (InvalidSpec naming spec.runAt, one Warning, no
    Job); any other runs exactly once when due, at that very instant, under a name that is a label
    value, and is then processed (nothing due, nothing next). Returns the runs planned."""
    instant = instant_of(run_at)
    first, second = run_at_decisions(name, run_at)
    runs = [*first.runs, *second.runs]
    if instant is None or not EPOCH <= instant <= LAST_TEN_DIGIT_SECOND:
        for decision in (first, second):
            assert decision.runs == [], f"{run_at} ran as {names(decision.runs)}"
            assert decision.recorded == []
            invalid = condition(decision.status, "InvalidSpec")
            assert invalid["status"] == "True", (run_at, invalid)
            assert invalid["message"].startswith("spec.runAt:"), invalid["message"]
        assert [(e.type, e.reason) for e in first.events] == [("Warning", "InvalidSpec")]
        assert second.events == [], "the same refusal is reported once"
        return runs
    assert condition(second.status, "InvalidSpec")["status"] == "False"
    assert second.recorded == [], f"{run_at} was due again after it ran"
    assert len(runs) == (1 if instant <= NOW + SECOND else 0), names(runs)
    for run in runs:
        assert run.slot == instant
        assert run.trigger == TRIGGER_SCHEDULE
        assert len(run.job_name) <= LABEL_VALUE_MAX, run.job_name
        assert DNS_LABEL.fullmatch(run.job_name), run.job_name
    processed = parse_time(second.status.get("processedUntil"))
    if runs:
        assert processed is not None
        assert processed >= instant, (processed, instant)
        assert second.status["runsCreated"] == 1
        assert second.status["nextScheduleTime"] is None
        assert second.wake_at is None
    else:
        assert processed is None or processed < instant
        assert second.status["nextScheduleTime"] == format_time(instant)
        assert second.wake_at == instant
    return runs


@properties(200)
@example(name="a" * 52, run_at="2286-11-20T17:46:39.999Z")
@example(name="a" * 52, run_at="1970-01-01T00:00:00Z")
@given(
    name=st.integers(1, 52).map(lambda size: "a" * size),
    run_at=rfc3339(date(1970, 1, 2), date(2286, 11, 19)),
)
def test_run_at_job_names_fit_a_label_value(name: str, run_at: str) -> None:
    check_run_at(name, run_at)


@properties(100)
@example(run_at="0001-01-01T00:00:00+01:00")
@example(run_at="9999-12-31T23:59:59-01:00")
@example(run_at="2286-11-20T17:46:40Z")
@example(run_at="2026-01-05T08:30:00.999Z")  # due only at the second decision
@example(run_at="2026-01-05T08:30:01.001Z")  # not due yet
@given(
    run_at=st.one_of(
        rfc3339(date(1000, 1, 1), date(9999, 12, 31)),
        rfc3339(date(2025, 12, 1), date(2026, 2, 1)),  # around NOW: past and future instants
    )
)
def test_decide_on_any_accepted_run_at_runs_it_once_or_refuses_it(run_at: str) -> None:
    runs = check_run_at("backup", run_at)
    instant = instant_of(run_at)
    event(
        "refused" if instant is None or not EPOCH <= instant <= LAST_TEN_DIGIT_SECOND else "valid"
    )
    event(f"{len(runs)} run(s)")


def test_a_run_at_with_microseconds_is_processed_once() -> None:
    """The first defect of issue 13: processedUntil kept milliseconds, so a runAt with finer
    digits was never processed and its Job was recorded again at every decision."""
    assert len(check_run_at("backup", "2026-01-05T08:00:00.123456789Z")) == 1


@properties(100)
@example(moment=datetime(999, 1, 1, tzinfo=UTC))
@example(moment=datetime(2026, 1, 5, 8, 0, 0, 999999, tzinfo=UTC))
@given(moment=st.datetimes(timezones=st.just(UTC)))
def test_format_and_parse_agree_at_any_precision(moment: datetime) -> None:
    """An instant, its stored text and that text parsed again are one instant, cut to ms."""
    stored = parse_time(format_time(moment))
    assert stored == parse_time(moment.isoformat())
    assert stored == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert format_time(stored) == format_time(moment)


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-01T25:00:00Z", 42, ["2026"], None],
)
def test_parse_time_of_hostile_text_is_none(text: object) -> None:
    assert parse_time(text) is None


@properties(100)
@example(run_at="1900-01-01T00:00:00Z")
@example(run_at="1969-12-31T23:59:59.999Z")
@example(run_at="1970-01-01T00:59:59+01:00")  # 1969-12-31T23:59:59Z
@given(run_at=rfc3339(date(1000, 1, 1), date(1969, 12, 31)))
def test_run_at_before_1970_is_refused_so_no_job_name_outgrows_a_label_value(run_at: str) -> None:
    """Before 1970 a Job name would carry negative epoch seconds, up to 12 characters: the Job of
    a 52-character ScheduledJob would not fit a label value. Such a runAt is refused, never run."""
    instant = instant_of(run_at)
    assume(instant is not None and instant < EPOCH)  # a negative offset can reach 1970
    assert check_run_at("a" * 52, run_at) == []
