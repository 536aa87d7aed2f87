"""The chart's alerting rules, run: rendered by helm for a few values, checked by `promtool check
rules`, and unit-tested by `promtool test rules` with the test files in tests/unit/deploy/alerts/
(one case per alert that fires and one that must not).

promtool is built from its Go module by `make promtool` (hack/promtool); without it, or without
helm (`make controlplane`), these tests skip, as the chart tests do.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_chart import CHART, REPO, documents, helm, needs_helm, render

PROMTOOL = os.environ.get("PROMTOOL", str(REPO / ".cache" / "bin" / "promtool"))
TESTS = Path(__file__).with_name("alerts")
RELEASE = ("cronlease", "cronlease-system")
RULES = ["--set", "prometheusRule.enabled=true"]
# Each promtool test file, and the chart values its rules are rendered with.
CASES = {
    "operator": [*RULES, "--set", "metrics.serviceMonitor.enabled=true"],
    "no-servicemonitor": RULES,
    "selector": [
        *RULES, "--set", "prometheusRule.selector.job=cronlease",
        "--set", "prometheusRule.selector.cluster=prod",
        "--set-string", 'prometheusRule.selector.team=a"b',
        "--set", "prometheusRule.expectScrape=true",
    ],
    "scheduledjobs": [
        *RULES, "--set", "prometheusRule.scheduledJobs.enabled=true",
        "--set", "prometheusRule.scheduledJobs.selector.job=kube-state-metrics",
        "--set", "watchNamespaces={team-a}",
    ],
}  # fmt: skip

needs_promtool = pytest.mark.skipif(
    not Path(PROMTOOL).exists(), reason=f"promtool is not built at {PROMTOOL}: run `make promtool`"
)


@functools.cache
def rule_groups(*values: str) -> list[dict[str, Any]]:
    """The rule groups of the chart's PrometheusRule, as Prometheus reads them (rendered once
    per set of values: callers only read them)."""
    [rule] = [d for d in documents(render(*values)) if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, check=False)


def rules_dir(case: str, tmp_path: Path) -> Path:
    """A directory with the case's rendered rules.yaml and its promtool test file."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups(*CASES[case])}))
    shutil.copy(TESTS / f"{case}.test.yaml", tmp_path)
    return tmp_path


@needs_helm
@needs_promtool
@pytest.mark.parametrize("case", sorted(CASES))
def test_promtool_checks_the_rules(case: str, tmp_path: Path) -> None:
    result = promtool("check", "rules", "rules.yaml", cwd=rules_dir(case, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
@needs_promtool
@pytest.mark.parametrize("case", sorted(CASES))
def test_promtool_unit_tests_of_the_alerts_pass(case: str, tmp_path: Path) -> None:
    result = promtool("test", "rules", f"{case}.test.yaml", cwd=rules_dir(case, tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def alert_cases(case: str) -> list[tuple[str, bool]]:
    """(alert name, whether it is expected to fire) for each alert_rule_test of a test file."""
    tests = yaml.safe_load((TESTS / f"{case}.test.yaml").read_text())["tests"]
    return [
        (check["alertname"], bool(check["exp_alerts"]))
        for test in tests
        for check in test["alert_rule_test"]
    ]


@needs_helm
def test_every_alert_has_a_case_that_fires_and_one_that_must_not() -> None:
    """Across the test files, for every alert any of them renders; and no file tests an alert
    its rules lack (a silent case of a missing alert would pass for nothing)."""
    fires: set[str] = set()
    silent: set[str] = set()
    rendered: set[str] = set()
    for case in CASES:
        names = set(alerts(rule_groups(*CASES[case])))
        rendered |= names
        for name, firing in alert_cases(case):
            assert name in names, f"{case}.test.yaml tests {name}, which its rules do not have"
            (fires if firing else silent).add(name)
    assert rendered - fires == set(), "alerts without a case that fires"
    assert rendered - silent == set(), "alerts without a case that must not fire"


@needs_helm
def test_down_alert_only_where_a_scrape_is_expected() -> None:
    """CronleaseNoLeader is silent when nothing is scraped; the absence of every replica is an
    alert only where a scrape is expected: the ServiceMonitor, or expectScrape."""
    assert "CronleaseDown" not in alerts(rule_groups(*CASES["no-servicemonitor"]))
    assert "CronleaseDown" in alerts(rule_groups(*CASES["operator"]))
    assert "CronleaseDown" in alerts(
        rule_groups(*RULES, "--set", "prometheusRule.expectScrape=true")
    )
    unexpected = [*CASES["operator"], "--set", "prometheusRule.expectScrape=false"]
    assert "CronleaseDown" not in alerts(rule_groups(*unexpected))
    assert "absent" not in alerts(rule_groups(*RULES))["CronleaseNoLeader"]["expr"]


@needs_helm
@pytest.mark.parametrize("release", ["cronlease", "a" * 53], ids=["short", "longest"])
def test_default_selector_is_what_the_service_monitor_scrapes(release: str) -> None:
    """The Prometheus Operator names a ServiceMonitor's targets' job after their Service: the
    rules' default job is the Service the ServiceMonitor selects, in the release's namespace
    (also when a long release name has the Service's name cut)."""
    docs = documents(render(*CASES["operator"], release=(release, "cronlease-system")))
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    ports = {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]}
    [service] = [
        d
        for d in docs
        if d["kind"] == "Service"
        and selected.items() <= d["metadata"]["labels"].items()
        and ports <= {port["name"] for port in d["spec"]["ports"]}
    ]
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    expr = alerts(rule["spec"]["groups"])["CronleaseNoLeader"]["expr"]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert f'{{job="{name}", namespace="{namespace}"}}' in expr


@needs_helm
def test_service_monitor_relabelings_render() -> None:
    relabel = '[{"action":"labeldrop","regex":"pod_template_hash"}]'
    docs = documents(
        render(
            "--set", "metrics.serviceMonitor.enabled=true",
            "--set-json", f"metrics.serviceMonitor.relabelings={relabel}",
            "--set-json", f"metrics.serviceMonitor.metricRelabelings={relabel}",
        )
    )  # fmt: skip
    [monitor] = [d for d in docs if d["kind"] == "ServiceMonitor"]
    [endpoint] = monitor["spec"]["endpoints"]
    expected = [{"action": "labeldrop", "regex": "pod_template_hash"}]
    assert endpoint["relabelings"] == endpoint["metricRelabelings"] == expected


@needs_helm
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (["--set", "prometheusRule.selector.bad-label=x"], "selector"),
        (["--set", "prometheusRule.selector.__name__=x"], "selector"),
        (["--set", "prometheusRule.selector.job=1"], "job"),
        (["--set", "prometheusRule.expectScrape=maybe"], "expectScrape"),
        (["--set", "prometheusRule.scheduledJobs.window=1 day"], "window"),
        (["--set", "prometheusRule.scheduledJobs.suspendedFor=-1h"], "suspendedFor"),
        (["--set", "prometheusRule.scheduledJobs.failedRuns=0"], "failedRuns"),
        (["--set", "metrics.serviceMonitor.relabelings[0]=drop"], "relabelings"),
    ],
    ids=[
        "label-name", "reserved-label", "not-a-string", "not-a-bool", "window", "suspended-for",
        "failed-runs", "relabelings",
    ],
)  # fmt: skip
def test_alert_values_are_checked(bad: list[str], field: str) -> None:
    result = helm("template", "cronlease", str(CHART), *RULES, *bad, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert field in result.stderr, result.stderr
