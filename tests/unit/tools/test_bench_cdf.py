"""The bench's report (bench/bench.py): the lag CDF counts every Job due, so missing Jobs keep
a controller's curve below 1 (issue 19, item 3), and the targets are issue 19's."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
from croniter import croniter

from devcluster.controllers import rate_flags

BENCH = Path(__file__).resolve().parents[3] / "bench" / "bench.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_under_test", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_controller_that_missed_half_its_jobs_reaches_only_half() -> None:
    module = bench()
    half = module.Phase("cronjob", 4, lags=[0.5, 1.0], missing=2)
    lags, due = module.cdf(half)
    assert (lags, due) == ([0.5, 1.0], 4)
    assert [(i + 1) / due for i in range(len(lags))][-1] == 0.5
    whole = module.Phase("cronlease", 4, lags=[0.4, 0.3, 0.2, 0.1])
    assert module.cdf(whole) == ([0.1, 0.2, 0.3, 0.4], 4)


def test_a_percentile_among_the_missing_jobs_is_missed_not_the_largest_measured() -> None:
    module = bench()
    half = module.Phase("cronjob", 4, lags=[2.0, 1.0], missing=2)
    assert (half.percentile(0.5), half.percentile(0.9)) == (2.0, None)
    assert module.Phase("cronjob", 0).percentile(0.5) is None  # nothing due, nothing measured


def test_the_targets_are_issue_34s() -> None:
    """1.1x the raw create of the same Jobs at every N; unpinned, 1.3x the raw create of bare
    Jobs at 1,000 and 5,000; p99 against CronJob's; RSS at rest after the bursts at 5,000
    against 100 MB (not before the slot, when the minutes before may still be at work); and no
    Lease lost."""
    module = bench()

    def entry(
        bursts: list[float | None], p99: float | None, theirs: float | None
    ) -> dict[str, object]:
        ended = [burst for burst in bursts if burst is not None]
        return {
            "raw_jobs_per_s": 1000.0,  # N bare Jobs in N/1000 s
            "raw_ours_jobs_per_s": 800.0,  # N of our Jobs in N/800 s
            "cronlease": {
                "bursts": bursts,
                "burst_seconds": sum(ended) / len(ended) if len(ended) == len(bursts) else None,
                "p99": p99,
                "rest_rss_mb": 130,
                "after_rss_mb": 99,
                "settled_rss_mb": 95,
                "after_jobs": 7000,
                "after_unfinished": 2000,
                "peak_rss_mb": 120,
            },
            "cronjob": {"p99": theirs},
        }

    verdicts = module.targets(
        {
            "by_n": {
                # a mean of 1.05 s: 0.84 x our Jobs' raw create, 1.05 x the bare one's: met
                "1000": entry([0.9, 1.2], 2.0, None),
                "5000": entry([7.6], None, None),  # 1.22 and 1.52 x: missed; p99 missed too
                "100": entry([0.05, None], 0.1, 0.2),  # a slot that never ended: missed
            },
            "lease": {"lost": 1, "renewals": "120 renewals"},
        }
    )
    assert verdicts == [
        "burst <= 1.1 x the raw create of the same Jobs at N=1000: 1.05 s vs 1.38 s, met "
        "(each slot: 0.90, 1.20; 0.84 x)",
        "burst <= 1.3 x the raw create of bare Jobs at N=1000: 1.05 s vs 1.30 s, met (1.05 x)",
        "burst <= 1.1 x the raw create of the same Jobs at N=5000: 7.60 s vs 6.88 s, MISSED "
        "(each slot: 7.60; 1.22 x)",
        "burst <= 1.3 x the raw create of bare Jobs at N=5000: 7.60 s vs 6.50 s, MISSED (1.52 x)",
        "burst <= 1.1 x the raw create of the same Jobs at N=100: missed s vs 0.14 s, MISSED "
        "(each slot: 0.05, missed; missed x)",
        "the leader never lost its Lease during the bursts: 1 times lost, MISSED (120 renewals)",
        "p99 <= CronJob's at N=1000: 2.000 vs missed s, met",
        "p99 <= CronJob's at N=5000: missed vs missed s, MISSED",
        "p99 <= CronJob's at N=100: 0.100 vs 0.200 s, met",
        "RSS <= 100 MB at rest after the bursts at N=5000: 99 MB, met "
        "(95 MB settled, 30 s later; peak 120 MB; 130 MB before the first measured slot; "
        "7000 Jobs in the namespace, 2000 of them not finished by the job controller)",
    ]


def test_each_slot_is_set_beside_the_raw_batch_that_met_the_same_jobs_before_it() -> None:
    """With --paced, each slot against its own batch (a second slot meets the first one's
    Jobs, and so did the second batch), not the means: a fast first slot must not hide a slow
    second. A batch that never ended is a miss, not a division."""
    module = bench()
    entry = {
        "raw_jobs_per_s": 100.0,
        "raw_ours_jobs_per_s": 80.0,  # 12.5 s for 1,000 of our Jobs into an empty namespace
        "raw_ours_paced_s": [12.0, 40.0],
        "cronlease": {"bursts": [10.0, 45.0], "burst_seconds": 27.5, "p99": None},
        "cronjob": {"p99": None},
    }
    lease = {"lost": 2, "lost_at": ["2026-12-07 12:03:58", "?"], "renewals": "2571 renewals"}
    verdicts = module.targets({"by_n": {"1000": entry}, "pinned": True, "lease": lease})
    assert verdicts[:3] == [
        "burst <= 1.1 x the raw create of the same Jobs at N=1000: 27.50 s vs 13.75 s, MISSED "
        "(each slot: 10.00, 45.00; 2.20 x)",
        # the means (27.5 against 26.0) would pass
        "each slot's burst <= 1.1 x the raw create of the same Jobs as the slots come at "
        "N=1000: MISSED (each slot: 10.00 s vs 12.00 s, 0.83 x; 45.00 s vs 40.00 s, 1.12 x)",
        "the leader never lost its Lease during the bursts: 2 times lost (at 2026-12-07 "
        "12:03:58, ?), MISSED (2571 renewals)",
    ]
    assert module._paced({"by_n": {"1000": entry}})[-2:] == [
        "| 1000 | 1 | 10.00 | 12.00 | 0.83 |",
        "| 1000 | 2 | 45.00 | 40.00 | 1.12 |",
    ]
    entry["cronlease"]["bursts"] = [10.0, 43.0]
    assert "N=1000: met" in module.targets({"by_n": {"1000": entry}, "pinned": True})[1]
    entry["raw_ours_paced_s"] = [12.0, None]
    assert module._paced({"by_n": {"1000": entry}})[-1] == "| 1000 | 2 | 43.00 | missed | missed |"
    assert "N=1000: MISSED" in module.targets({"by_n": {"1000": entry}, "pinned": True})[1]
    assert module._paced({"by_n": {"1000": {"cronlease": {}}}}) == []  # not measured


def test_a_slots_burst_ends_with_its_last_job_or_never() -> None:
    module = bench()
    first, second = (datetime(2026, 12, 4, 1, minute, tzinfo=UTC) for minute in (0, 1))
    at = first.timestamp()
    found = [(first, at + 0.2, 0.2), (second, at + 60.1, 0.1), (first, at + 0.5, 0.5)]
    assert module.burst_of(found, first, 2) == pytest.approx(0.5)
    assert module.burst_of(found, second, 1) == pytest.approx(0.1)
    assert module.burst_of(found, second, 2) is None  # one of its two Jobs never came


def test_the_watcher_counts_a_namespaces_jobs_and_the_unfinished_among_them() -> None:
    watcher = bench().JobWatcher(None, "run")

    def job(uid: str, namespace: str, *conditions: tuple[str, str]) -> dict[str, object]:
        return {
            "metadata": {"uid": uid, "namespace": namespace, "annotations": {}},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
        }

    watcher.changed("ADDED", job("a", "ours"))
    watcher.changed("ADDED", job("b", "ours"))
    watcher.changed("ADDED", job("c", "ours"))
    watcher.changed("ADDED", job("d", "theirs"))
    watcher.changed("MODIFIED", job("a", "ours", ("Complete", "True")))
    watcher.changed("MODIFIED", job("b", "ours", ("Failed", "False")))
    watcher.changed("DELETED", job("c", "ours"))
    assert watcher.jobs_in("ours") == (2, 1)
    assert watcher.jobs_in("theirs") == (1, 1)


async def test_a_raw_create_ends_when_the_watcher_has_seen_its_last_job() -> None:
    """Timed as a burst is: to the last Job's first ADDED event, each Job counted once (a
    relisting after a 410 delivers it again), other namespaces' Jobs apart."""
    watcher = bench().JobWatcher(None, "run")

    def job(uid: str, namespace: str) -> dict[str, object]:
        return {"metadata": {"uid": uid, "namespace": namespace}}

    watcher.changed("ADDED", job("a", "raw"))
    watcher.changed("ADDED", job("x", "other"))
    watcher.changed("ADDED", job("b", "raw"))
    watcher.listed_item(job("a", "raw"))
    assert await watcher.all_seen("raw", 2) == watcher.arrivals["b"][0]
    with pytest.raises(RuntimeError, match="saw 2 of the 3 Jobs in raw"):
        await watcher.all_seen("raw", 3, limit=0.0)
    waiting = asyncio.create_task(watcher.all_seen("raw", 3, limit=5.0))
    await asyncio.sleep(0)  # one turn of the loop: the task is now waiting...
    assert not waiting.done()
    watcher.changed("ADDED", job("c", "raw"))  # ...and this arrival wakes it
    assert await waiting == watcher.arrivals["c"][0]


def test_the_report_names_the_controller_managers_rate() -> None:
    module = bench()
    assert module.controller_manager_rate({}).endswith("(its rate unknown)")
    default = {"kube-controller-manager": ["kcm", "--controllers=*"]}
    assert "its default client rate" in module.controller_manager_rate(default)
    tuned = rate_flags("300")
    assert tuned == ["--kube-api-qps=300", "--kube-api-burst=450"]
    assert module.controller_manager_rate({"kube-controller-manager": ["kcm", *tuned]}) == (
        "kube-controller-manager: --kube-api-qps=300 --kube-api-burst=450"
    )
    assert rate_flags("") == []
    with pytest.raises(ValueError, match="CRONLEASE_KCM_QPS"):
        rate_flags("0.5")


def test_the_burst_cpu_is_interpolated_between_samples() -> None:
    """The operator's CPU over its burst, from samples a quarter of a second apart: a burst of
    a second or two must not be widened to the samples around it."""
    sampler = bench().CostSampler(0)
    sampler.samples = [(0.0, 60.0, 0.0), (1.0, 60.0, 0.5), (2.0, 61.0, 1.5)]
    assert sampler.cpu_between(0.5, 1.5) == pytest.approx(0.75)
    assert sampler.cpu_between(1.0, 2.0) == pytest.approx(1.0)
    assert math.isnan(sampler.cpu_between(0.5, 2.5))  # past the last sample


@pytest.mark.parametrize(
    "first",
    [
        datetime(2026, 12, 2, 19, 30, tzinfo=UTC),
        datetime(2026, 12, 2, 19, 59, tzinfo=UTC),  # across an hour's end
        datetime(2026, 12, 31, 23, 58, tzinfo=UTC),  # across a year's end
    ],
)
@pytest.mark.parametrize("slots", [1, 2, 15])
def test_the_measured_schedule_fires_at_the_measured_slots_alone(
    first: datetime, slots: int
) -> None:
    """From 45 minutes before (the objects were created minutes before) to 45 minutes after,
    the armed objects fire at the measured minutes and at no other: a slot before them would
    leave work running into them (design note 106)."""
    module = bench()
    measured = [first + timedelta(minutes=i) for i in range(slots)]
    fires = croniter(module.firing_only_at(measured), first - timedelta(minutes=45))
    instants = [fires.get_next(datetime) for _ in range(slots + 1)]
    assert instants[:slots] == measured
    assert instants[slots] > measured[-1] + timedelta(minutes=45)


def test_the_objects_are_created_dormant() -> None:
    """The schedule they are created with fires within no phase: its next instant is on
    29 February 2028."""
    fires = croniter(bench().DORMANT, datetime(2026, 12, 2, tzinfo=UTC))
    assert fires.get_next(datetime) == datetime(2028, 2, 29, tzinfo=UTC)


def test_the_lease_record_says_when_each_loss_was() -> None:
    """So that a loss in a burst can be told from one elsewhere in the run; a line without a
    time still counts."""

    class Operator:
        def log(self) -> str:
            return (
                "2026-12-07 11:31:17,217 INFO cronlease.shell.keyedloop: scheduler: leading\n"
                "2026-12-07 12:03:58,487 INFO cronlease.shell.leadership: stopped leading "
                "cronlease-leader (token 0): no renewal within the renew deadline (3 s)\n"
                '{"message": "stopped leading cronlease-leader (token 0): shutting down"}\n'
            )

        def metrics(self) -> str:
            return ""

    record = bench().lease_record(Operator())
    assert (record["lost"], record["lost_at"]) == (2, ["2026-12-07 12:03:58", "?"])


def test_a_slot_is_split_by_whether_its_scheduledjobs_had_recorded_the_slot_before() -> None:
    module = bench()
    lags = {"a": 1.0, "b": 3.0, "c": 9.0, "d": 12.0, "e": 2.0}
    split = module.behind_split(lags, {"c", "d", "gone"})
    assert split["behind"] == {"jobs": 2, "p50": 9.0, "max": 12.0}
    assert split["recorded"] == {"jobs": 3, "p50": 2.0, "max": 3.0}
    line = module._behind(split)
    assert "2 Jobs (p50 9.00 s, max 12.00 s)" in line
    assert "3 Jobs (p50 2.00 s, max 3.00 s)" in line
    assert module.behind_split(lags, set())["behind"] == {"jobs": 0, "p50": None, "max": None}
    assert "not recorded the slot before 2 s ahead of it, 0 Jobs;" in module._behind(
        module.behind_split(lags, set())
    )
    unread = module.behind_split(lags, None)  # the list failed: not a measured zero
    assert unread == {"behind": None, "recorded": None}
    assert module._behind(unread).endswith("not read")


async def test_which_scheduledjobs_were_behind_is_none_when_the_list_fails() -> None:
    """A failed list is reported as not read, never as no ScheduledJob behind."""

    class Failing:
        async def request(self, *args: object, **kwargs: object) -> dict[str, object]:
            raise ConnectionResetError("gone")

    class Listing:
        async def request(self, *args: object, **kwargs: object) -> dict[str, object]:
            return {"items": [{"metadata": {"name": "late"}, "status": {}}]}

    module = bench()
    before = datetime(2026, 1, 1, tzinfo=UTC)  # both long past: no wait for the lead
    slot = before + timedelta(minutes=1)
    assert await module.unrecorded_before(Failing(), "/x", before, slot) is None
    assert await module.unrecorded_before(Listing(), "/x", before, slot) == {"late"}
