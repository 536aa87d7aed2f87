"""What the chart ships for monitoring, against running programs: every metric the dashboard and
the alerts read is exported by a running operator, and kube-state-metrics, given the chart's
config and ClusterRole, serves the kube_scheduledjob_* series with the values in the
ScheduledJob's status."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from cronlease.shell import metricseries
from devcluster.cluster import bin_dir
from devcluster.install import CHART, service_account_kubeconfig
from devcluster.processes import free_port, spawn, stop
from devcluster.replica import REPO, OperatorProcess
from kube import Kube, jobs_of, scheduledjob, status_of, wait_for
from promql import dashboard_queries, exported_names, metric_names, rule_expressions

DASHBOARD = CHART / "files" / "dashboard.json"
SUCCEEDED = {"name": "cronlease_job_results_total", "result": "Succeeded", "trigger": "Schedule"}


def helm_template(*args: str) -> list[dict[str, Any]]:
    command = [str(bin_dir() / "helm"), "template", *args]
    rendered = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def samples(exposition: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(exposition) for s in family.samples]


def value(exposition: str, name: str, **labels: str) -> float | None:
    """The value of the one sample `name` whose labels include `labels`, or None."""
    found = [
        s.value
        for s in samples(exposition)
        if s.name == name and labels.items() <= s.labels.items()
    ]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


# --- the operator's metrics ---------------------------------------------------------------------


def test_every_dashboard_and_alert_metric_is_exported_by_a_running_operator(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Once the operator has led, created Jobs, seen them finish and skipped a slot, every name a
    dashboard query or an alert reads is one it exports; those it has counted have samples."""
    kube.apply(
        scheduledjob(
            "observed", namespace, duration="3s", schedule="*/2 * * * * *",
            concurrencyPolicy="Forbid",
        )
    )  # fmt: skip
    wait_for(
        lambda: (
            status_of(kube, namespace, "observed").get("slotsSkipped", {}).get("ConcurrencyForbid")
            and status_of(kube, namespace, "observed").get("lastSuccessfulTime")
        ),
        30,
        "a run finished and a slot skipped by Forbid",
    )
    exposition = wait_for(
        lambda: (
            (text := operator.metrics())
            # Schedule's: runs of other triggers may have been counted by earlier tests
            and value(text, "cronlease_job_results_total", result="Succeeded", trigger="Schedule")
            and text
        ),
        15,
        "the operator to count the finished run",
    )
    exported = exported_names(exposition)
    rules = rule_expressions(
        helm_template("cronlease", str(CHART), "--set", "prometheusRule.enabled=true")
    )
    queries = {f"dashboard: {q}": q for q in dashboard_queries(DASHBOARD)}
    queries |= {f"alert {name}: {expr}": expr for name, expr in rules.items()}
    missing = {
        where: sorted(metric_names(query) - exported)
        for where, query in queries.items()
        if metric_names(query) - exported
    }
    assert not missing, f"not exported by the operator: {missing}"
    assert value(exposition, "cronlease_leader") == 1
    assert (value(exposition, "cronlease_jobs_created_total", trigger="Schedule") or 0) >= 1
    assert (value(exposition, "cronlease_schedule_lag_seconds_count") or 0) >= 1
    assert value(exposition, "cronlease_slots_skipped_total", reason="ConcurrencyForbid")
    assert value(exposition, "process_resident_memory_bytes")


def test_a_standby_exports_every_series_at_zero_and_counts_no_results(
    kube: Kube, namespace: str, operator: OperatorProcess, operator_kubeconfig: Path, tmp_path: Path
) -> None:
    """A standby serves every labelled counter's series from its start (so that increase() sees
    its first event once it leads), and counts no finished Job: the leader's count is the
    cluster's, and a sum over replicas counts each Job once. The standby watches the test's
    namespace only, so that what its model holds is this test's."""
    wait_for(lambda: value(operator.metrics(), "cronlease_leader") == 1, 15, "the operator to lead")
    standby = OperatorProcess(operator_kubeconfig, tmp_path, "standby")
    standby.start(f"--namespace={namespace}")
    try:
        exposition = standby.metrics()
        assert value(exposition, "cronlease_leader") == 0
        assert value(exposition, "cronlease_dead_letters") == 0
        for counter, label_values in metricseries.label_values().items():
            for labels in label_values:
                named = dict(zip(counter._labelnames, labels, strict=True))
                found = value(exposition, f"{counter._name}_total", **named)
                assert found is not None, (counter._name, named)
        info = [s for s in samples(exposition) if s.name == "cronlease_build_info"]
        assert [s.value for s in info] == [1]
        before = value(operator.metrics(), **SUCCEEDED) or 0
        kube.apply(scheduledjob("counted", namespace, duration="1s", schedule="*/2 * * * * *"))
        wait_for(
            lambda: (value(operator.metrics(), **SUCCEEDED) or 0) >= before + 2,
            30,
            "the leader to count two finished runs",
        )
        # Before judging the standby, a sign from it that its model has seen those Jobs finish:
        # a run that fails now (one attempt) is labelled a dead letter by the leader once it has
        # failed, later than those runs ended, and the standby's one Job watch delivers events in
        # that order; once its dead_letters gauge counts that Job, it has seen them finish.
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        doomed = scheduledjob(
            "doomed", namespace, result="Failed", runAt=now, retry={"maxAttempts": 1}
        )
        kube.apply(doomed)
        wait_for(
            lambda: value(standby.metrics(), "cronlease_dead_letters") == 1,
            30,
            "the standby to see the failed run's Job labelled a dead letter",
        )
        counted = [
            s.value for s in samples(standby.metrics()) if s.name == "cronlease_job_results_total"
        ]
        assert counted, "the standby serves no job_results series"
        assert set(counted) == {0}, "the standby counted finished Jobs"
    finally:
        standby.stop()


# --- kube-state-metrics with the chart's config -------------------------------------------------


@pytest.fixture(scope="session")
def kube_state_metrics_binary() -> Path:
    """kube-state-metrics at the version hack/kube-state-metrics pins (built if missing)."""
    subprocess.run(["bash", str(REPO / "hack" / "kube-state-metrics" / "build.sh")], check=True)
    return bin_dir() / "kube-state-metrics"


@pytest.fixture
def kube_state_metrics(
    kube: Kube, namespace: str, kube_state_metrics_binary: Path, tmp_path: Path
) -> Iterator[str]:
    """kube-state-metrics as its own ServiceAccount, with the chart's ConfigMap and RBAC (a
    release named after the test's namespace, so its cluster-scoped names are its own): the URL
    of its /metrics."""
    docs = helm_template(
        namespace, str(CHART), "--namespace", namespace,
        "--set", "kubeStateMetrics.enabled=true",
        "--set", "kubeStateMetrics.serviceAccount=kube-state-metrics",
        "--show-only", "templates/kube-state-metrics.yaml",
    )  # fmt: skip
    kube.run("create", "serviceaccount", "kube-state-metrics", "-n", namespace)
    for doc in docs:
        kube.apply(doc)
    cluster_scoped = [f"{d['kind'].lower()}/{d['metadata']['name']}" for d in docs[1:]]
    [configmap] = [d for d in docs if d["kind"] == "ConfigMap"]
    config = tmp_path / "scheduledjob.yaml"
    config.write_text(configmap["data"]["scheduledjob.yaml"])
    kubeconfig = service_account_kubeconfig(
        kube.kubeconfig, tmp_path / "kubeconfig", account="kube-state-metrics", namespace=namespace
    )
    port, telemetry = free_port(), free_port()
    binary = str(kube_state_metrics_binary)
    process = spawn(
        [
            binary, f"--kubeconfig={kubeconfig}",
            "--host=127.0.0.1", f"--port={port}",
            "--telemetry-host=127.0.0.1", f"--telemetry-port={telemetry}",
            "--custom-resource-state-only", f"--custom-resource-state-config-file={config}",
            f"--namespaces={namespace}",
        ],
        tmp_path / "kube-state-metrics.log",
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}/metrics"
    finally:
        stop(process.pid, binary)
        kube.run("delete", *cluster_scoped, "--ignore-not-found")


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text: str = response.read().decode()
            return text
    except OSError:
        return ""


def unix(timestamp: str) -> float:
    """What kube-state-metrics makes of an RFC 3339 time: whole seconds."""
    return float(int(datetime.fromisoformat(timestamp).timestamp()))


def expected_series(sj: dict[str, Any]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The kube_scheduledjob_* samples a ScheduledJob should give, by name and extra labels."""
    spec, status = sj["spec"], sj["status"]
    plain = {
        "created": unix(sj["metadata"]["creationTimestamp"]),
        "spec_suspend": 0.0,
        "spec_starting_deadline_seconds": float(spec["startingDeadlineSeconds"]),
        "spec_successful_job_history_limit": float(spec["successfulJobsHistoryLimit"]),
        "spec_failed_job_history_limit": float(spec["failedJobsHistoryLimit"]),
        "status_active": float(status.get("activeCount", 0)),
        "status_last_schedule_time": unix(status["lastScheduleTime"]),
        "status_last_successful_time": unix(status["lastSuccessfulTime"]),
        "next_schedule_time": unix(status["nextScheduleTime"]),
        "schedule_invalid": 0.0,
        "status_runs_created": float(status["runsCreated"]),
    }
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
        (f"kube_scheduledjob_{name}", ()): v for name, v in plain.items()
    }
    info = {
        "schedule": spec["schedule"],
        "concurrency_policy": spec["concurrencyPolicy"],
        "timezone": spec["timeZone"],
    }
    series[("kube_scheduledjob_info", tuple(sorted(info.items())))] = 1.0
    series[("kube_scheduledjob_labels", (("label_team", "observability"),))] = 1.0
    for condition in status["conditions"]:
        key = ("kube_scheduledjob_status_condition", (("condition", condition["type"]),))
        series[key] = 1.0 if condition["status"] == "True" else 0.0
    for reason, count in status["slotsSkipped"].items():
        key = ("kube_scheduledjob_status_slots_skipped", (("reason", reason),))
        series[key] = float(count)
    return series


def served_series(
    exposition: str, name: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """kube-state-metrics' samples for ScheduledJob `name`, keyed like expected_series (the
    labels every series carries left out)."""
    common = {"scheduledjob", "namespace", "customresource_group", "customresource_kind"}
    common |= {"customresource_version"}
    served: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for s in samples(exposition):
        if s.labels.get("scheduledjob") == name:
            key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in common)))
            assert key not in served, f"two samples {key}: {served[key]} and {s.value}"
            served[key] = s.value
    return served


def test_kube_state_metrics_serves_scheduledjob_series_like_cronjobs(
    kube: Kube, namespace: str, operator: OperatorProcess, kube_state_metrics: str
) -> None:
    manifest = scheduledjob(
        "observed", namespace, duration="3s", schedule="*/2 * * * * *",
        concurrencyPolicy="Forbid", startingDeadlineSeconds=30,
    )  # fmt: skip
    manifest["metadata"]["labels"] = {"team": "observability"}
    kube.apply(manifest)
    # Valid to the API server, but 30 February never comes: the operator reports InvalidSpec.
    kube.apply(scheduledjob("never", namespace, schedule="0 0 30 2 *"))
    wait_for(
        lambda: (
            (s := status_of(kube, namespace, "observed")).get("lastSuccessfulTime")
            and s.get("slotsSkipped")
        ),
        30,
        "a finished run and a skipped slot",
    )
    assert jobs_of(kube, namespace, "observed")
    config = yaml.safe_load((CHART / "files" / "kube-state-metrics.yaml").read_text())
    families = {f"kube_{m['name']}" for m in config["spec"]["resources"][0]["metrics"]}
    last: dict[str, Any] = {}

    def matches() -> bool:
        """Status moves every 2 s, and kube-state-metrics follows it by a watch: read both until
        they agree."""
        sj = kube.json("get", "scheduledjob", "observed", "-n", namespace)
        served = served_series(scrape(kube_state_metrics), "observed")
        expected = expected_series(sj)
        last.update(
            wrong={k: (v, served.get(k)) for k, v in expected.items() if served.get(k) != v},
            families=families - {name for name, _ in served},
        )
        return not last["wrong"] and not last["families"]

    try:
        wait_for(matches, 30, "kube-state-metrics to serve the status", interval=0.5)
    except AssertionError as error:
        raise AssertionError(f"{error}; last differences: {last}") from None
    invalid = wait_for(
        lambda: (
            (served := served_series(scrape(kube_state_metrics), "never"))
            and served.get(("kube_scheduledjob_schedule_invalid", ())) == 1
            and served
        ),
        15,
        "kube_scheduledjob_schedule_invalid 1 for an InvalidSpec ScheduledJob",
    )
    assert invalid[("kube_scheduledjob_status_condition", (("condition", "InvalidSpec"),))] == 1
    assert invalid[("kube_scheduledjob_status_active", ())] == 0
    assert ("kube_scheduledjob_next_schedule_time", ()) not in invalid
