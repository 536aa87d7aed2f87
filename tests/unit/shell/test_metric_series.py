"""Every series of every labelled counter exists at 0 from the start (cronlease.shell.metricseries),
so that increase() sees the first event of each label value after a restart; the label values are
the ones the code can emit; and job results are counted once, by the leader."""

from __future__ import annotations

import ast
import copy
import itertools
from pathlib import Path
from typing import Any

import prometheus_client
from builders import NAME, utc, view
from prometheus_client import Counter

import cronlease
from cronlease.app.wiring import count_result
from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import PlannedRun, SkipReason
from cronlease.core.decide.supervision import Action, Escalation
from cronlease.core.names import naming
from cronlease.core.names.jobinfo import JobState, job_info
from cronlease.core.names.naming import ANNOTATION_TRIGGER, scheduled_job_name
from cronlease.shell import metrics, metricseries
from cronlease.shell.leadership import SoleLeader
from cronlease.shell.modelwatch import WATCH_OPERATION
from cronlease.shell.writer import Verb

SLOT = utc(2026, 1, 5, 9)
PACKAGE = Path(cronlease.__file__).parent
TRIGGERS = {value for name, value in vars(naming).items() if name.startswith("TRIGGER_")}
RESULTS = {JobState.SUCCEEDED.value, JobState.FAILED.value}

# Every `metrics.<counter>.labels(...)` call site's argument expressions, and the values each one
# can take. The types behind them are the call sites' annotations, which mypy --strict checks;
# where a str is typed, the comment says what bounds it. A new call site, or a changed argument,
# fails test_every_call_site_emits_only_initialised_values until it is added here.
CALL_SITES: dict[tuple[str, tuple[str, ...]], list[set[str]]] = {
    # decision.SkippedSlots.reason: SkipReason
    ("slots_skipped", ("skip.reason.value",)): [{r.value for r in SkipReason}],
    # writer.Writer._write(verb: Verb)
    ("reconcile_errors", ("verb.value",)): [{v.value for v in Verb}],
    ("reconcile_errors", ("WATCH_OPERATION",)): [{WATCH_OPERATION}],
    # wiring.count_result: the Model calls it for finished Jobs only (Succeeded or Failed); a
    # trusted Job's trigger is one of naming's (test_an_unknown_trigger_is_not_trusted), else
    # the untrusted trigger.
    ("job_results", ("info.state.value", "trigger")): [
        RESULTS,
        TRIGGERS | {metricseries.UNTRUSTED_TRIGGER},
    ],
    # applier: PlannedRun.trigger is one of naming's TRIGGER_* (reconcile, requestplan), or a
    # retried attempt's, read from a trusted Job.
    ("jobs_created", ("run.trigger",)): [TRIGGERS],
    ("run_attempts", ("run.trigger",)): [TRIGGERS],
    # supervision.StepCreation.action: Action; RunPlan.escalation: Escalation | None (not None)
    ("step_attempts", ("planned.action.value",)): [{a.value for a in Action}],
    ("escalations", ("plan.escalation.value",)): [{e.value for e in Escalation}],
}


def labelled_counters() -> dict[str, Counter]:
    return {
        name: family
        for name, family in vars(metrics).items()
        if isinstance(family, Counter) and family._labelnames
    }


def call_sites() -> dict[tuple[str, tuple[str, ...]], list[str]]:
    """Each `metrics.X.labels(args)` of a counter X in the operator's package: (X, args as
    source) -> the files it is in."""
    counters = labelled_counters()
    found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            family = node.func.value
            if not (
                node.func.attr == "labels"
                and isinstance(family, ast.Attribute)
                and isinstance(family.value, ast.Name)
                and family.value.id == "metrics"
                and family.attr in counters
            ):
                continue
            assert not node.keywords, f"{path.name}: label values by position, please"
            key = (family.attr, tuple(ast.unparse(arg) for arg in node.args))
            found.setdefault(key, []).append(path.name)
    return found


def series(counter: Counter) -> dict[tuple[str, ...], float]:
    """The counter's samples, by label values."""
    [family] = counter.collect()
    names = counter._labelnames
    return {
        tuple(sample.labels[name] for name in names): sample.value
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def test_every_labelled_counter_is_initialised() -> None:
    """No labelled counter is left out, and the build_info gauge is the only other labelled
    family (set once, to 1)."""
    initialised = {counter._name for counter in metricseries.label_values()}
    assert initialised == {counter._name for counter in labelled_counters().values()}
    labelled = {
        name
        for name, family in vars(metrics).items()
        if isinstance(family, prometheus_client.metrics.MetricWrapperBase) and family._labelnames
    }
    assert labelled - set(labelled_counters()) == {"build_info"}


def test_initialise_makes_every_series_at_zero() -> None:
    metricseries.initialise("1.2.3")
    for counter, values in metricseries.label_values().items():
        present = series(counter)
        assert set(values) <= set(present), counter._name
        assert len(values) == len(set(values)), counter._name
    exposition = prometheus_client.generate_latest().decode()
    assert 'cronlease_slots_skipped_total{reason="Superseded"}' in exposition
    assert 'cronlease_escalations_total{reason="HeartbeatLost"}' in exposition
    [info] = [
        s
        for s in next(iter(metrics.build_info.collect())).samples
        if s.labels["version"] == "1.2.3"
    ]
    assert info.value == 1
    assert info.labels["python_version"].count(".") == 2


def test_every_call_site_emits_only_initialised_values() -> None:
    """What the call sites can emit (CALL_SITES, from their argument types) and what is made at
    start are the same series: none missing, and none that no call site can ever increment."""
    found = call_sites()
    assert set(found) == set(CALL_SITES), (
        f"call sites not described in CALL_SITES: {sorted(set(found) - set(CALL_SITES))}; "
        f"described but gone: {sorted(set(CALL_SITES) - set(found))}"
    )
    initialised = {c._name: set(v) for c, v in metricseries.label_values().items()}
    counters = labelled_counters()
    emittable: dict[str, set[tuple[str, ...]]] = {name: set() for name in initialised}
    for (name, args), domains in CALL_SITES.items():
        counter = counters[name]
        assert len(domains) == len(args) == len(counter._labelnames), name
        # every combination of the values each argument can take
        emitted = set(itertools.product(*domains))
        missing = emitted - initialised[counter._name]
        assert not missing, f"{name}{args} can emit series not made at start: {sorted(missing)}"
        emittable[counter._name] |= emitted
    never = {
        name: sorted(values - emittable[name])
        for name, values in initialised.items()
        if values - emittable[name]
    }
    assert not never, f"series made at start that no call site emits: {never}"


def finished_job(state: JobState) -> dict[str, Any]:
    slot_name = scheduled_job_name(NAME, SLOT, with_seconds=False)
    job = build_job(view(), PlannedRun(slot_name, SLOT, "Schedule"), "replica-a", 3)
    job["metadata"]["uid"] = "u1"
    kind = "Complete" if state is JobState.SUCCEEDED else "Failed"
    job["status"] = {
        "conditions": [{"type": kind, "status": "True", "lastTransitionTime": "2026-01-05T09:01Z"}]
    }
    return job


def test_an_unknown_trigger_is_not_trusted() -> None:
    """What bounds job_results' trigger: a Job's annotation is read only when trusted."""
    job = finished_job(JobState.SUCCEEDED)
    assert job_info(job).trusted
    made_up = copy.deepcopy(job)
    made_up["metadata"]["annotations"][ANNOTATION_TRIGGER] = "Whenever"
    assert not job_info(made_up).trusted


async def test_job_results_are_counted_by_the_leader_only() -> None:
    metricseries.initialise("1.2.3")
    before = series(metrics.job_results)
    leader = SoleLeader("replica-a")
    count_result(leader, finished_job(JobState.SUCCEEDED))
    count_result(leader, finished_job(JobState.FAILED))
    made_up = finished_job(JobState.FAILED)
    made_up["metadata"]["annotations"][ANNOTATION_TRIGGER] = "Whenever"
    count_result(leader, made_up)
    standby = SoleLeader("replica-b")
    await standby.release()  # no longer leads
    count_result(standby, finished_job(JobState.SUCCEEDED))
    after = series(metrics.job_results)
    assert set(after) == set(before), "a new series appeared"
    grown = {
        labels: after[labels] - before[labels]
        for labels in after
        if after[labels] != before[labels]
    }
    assert grown == {("Succeeded", "Schedule"): 1, ("Failed", "Schedule"): 1, ("Failed", ""): 1}
