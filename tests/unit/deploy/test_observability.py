"""What the chart ships for monitoring, checked without a cluster: kube-state-metrics' config reads
only fields the ScheduledJob's schema has, every dashboard query and alert names a metric the
operator declares, and the PromQL reading itself. tests/e2e/test_observability.py holds the same
names against a running operator and the config against a running kube-state-metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import yaml
from test_chart import CHART, OBSERVABILITY, documents, helm, needs_helm, render

from cronlease.core.decide.decision import EXPECTED_SKIPS, SkipReason
from cronlease.shell import metrics
from promql import _panels, dashboard_queries, exported_names, metric_names, rule_expressions

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "crds" / "cronlease.io_scheduledjobs.yaml"
KSM_CONFIG = CHART / "files" / "kube-state-metrics.yaml"
DASHBOARD = CHART / "files" / "dashboard.json"
CONDITION_STATUSES = {"True", "False", "Unknown"}
# The CRD's schema leaves metadata to the API server (ObjectMeta): the fields the config may read.
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
        "creationTimestamp": {"type": "string", "format": "date-time"},
    },
}


# --- kube-state-metrics' custom-resource-state config -------------------------------------------


def crd_schema() -> dict[str, Any]:
    """The ScheduledJob's schema, with ObjectMeta's fields under metadata."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return {**schema, "properties": {**schema["properties"], "metadata": OBJECT_META}}


def resolve(schema: dict[str, Any], path: list[str], where: str) -> dict[str, Any]:
    """The schema `path` reaches from `schema`, in kube-state-metrics' path syntax: field names,
    "[key=value]" to pick a list item by a field, a digit string to index a list."""
    for part in path:
        if part.startswith("[") and part.endswith("]"):
            assert schema.get("type") == "array", f"{where} {path}: {part} on a non-list"
            key = part[1:-1].split("=", 1)[0]
            assert key in schema["items"].get("properties", {}), f"{where} {path}: no field {key}"
            schema = schema["items"]
        elif part.isdigit():
            assert schema.get("type") == "array", f"{where} {path}: index on a non-list"
            schema = schema["items"]
        else:
            properties = schema.get("properties", {})
            assert part in properties, f"{where} {path}: no field {part!r} in the CRD's schema"
            schema = properties[part]
    return schema


def each_element(schema: dict[str, Any]) -> dict[str, Any]:
    """What valueFrom and a metric's labelsFromPath are relative to: a list's or a map's items,
    else the object the path reached."""
    if schema.get("type") == "array":
        items: dict[str, Any] = schema["items"]
        return items
    if isinstance(schema.get("additionalProperties"), dict):
        values: dict[str, Any] = schema["additionalProperties"]
        return values
    return schema


def numeric(schema: dict[str, Any]) -> bool:
    """What kube-state-metrics turns into a number: numbers, booleans, RFC 3339 times, and
    condition statuses ("True", "False", "Unknown")."""
    if schema.get("type") in ("integer", "number", "boolean"):
        return True
    statuses = set(schema.get("enum", []))
    return schema.get("type") == "string" and (
        schema.get("format") == "date-time" or (bool(statuses) and statuses <= CONDITION_STATUSES)
    )


def ksm_resources() -> list[dict[str, Any]]:
    config = yaml.safe_load(KSM_CONFIG.read_text())
    assert config["kind"] == "CustomResourceStateMetrics"
    resources: list[dict[str, Any]] = config["spec"]["resources"]
    return resources


def test_ksm_config_watches_the_served_scheduledjob_version() -> None:
    crd = yaml.safe_load(CRD.read_text())
    served = {v["name"] for v in crd["spec"]["versions"] if v["served"]}
    [resource] = ksm_resources()
    assert resource["groupVersionKind"] == {
        "group": crd["spec"]["group"],
        "version": resource["groupVersionKind"]["version"],
        "kind": crd["spec"]["names"]["kind"],
    }
    assert resource["groupVersionKind"]["version"] in served


def test_ksm_config_reads_only_fields_the_crd_has() -> None:
    """A renamed or removed status field breaks this, not a dashboard months later."""
    schema = crd_schema()
    [resource] = ksm_resources()
    for label, path in resource["labelsFromPath"].items():
        resolve(schema, path, f"labelsFromPath {label}")
    for family in resource["metrics"]:
        kind = family["each"]["type"]
        spec = family["each"][kind[0].lower() + kind[1:]]
        where = family["name"]
        reached = resolve(schema, spec.get("path", []), where) if spec.get("path") else schema
        element = each_element(reached)
        for label, path in spec.get("labelsFromPath", {}).items():
            # Resolved against the element, and failing that against the object's root.
            target = resolve(schema if path[:1] == ["metadata"] else element, path, where)
            if label.endswith("*"):
                assert target == STRING_MAP, (where, label)
            else:
                assert target.get("type") in ("string", "integer", "boolean"), (where, label)
        if kind == "Gauge":
            value = resolve(element, spec.get("valueFrom", []), where)
            assert numeric(value), f"{where}: {spec.get('valueFrom')} is not a number, time or bool"
            # On an object, kube-state-metrics turns each of its other fields into a 0 as well.
            assert not spec.get("nilIsZero") or numeric(reached), f"{where}: nilIsZero on an object"


def test_ksm_series_are_named_like_cronjobs() -> None:
    """kube_cronjob_X becomes kube_scheduledjob_X, with the label scheduledjob for cronjob: an
    alert carries over by a rename. The README's table lists every series."""
    [resource] = ksm_resources()
    assert resource["metricNamePrefix"] == "kube"
    assert resource["labelsFromPath"] == {
        "scheduledjob": ["metadata", "name"],
        "namespace": ["metadata", "namespace"],
    }
    names = {f"kube_{family['name']}" for family in resource["metrics"]}
    assert all(name.startswith("kube_scheduledjob_") for name in names)
    readme = (REPO / "README.md").read_text()
    listed = set(re.findall(r"`(kube_scheduledjob_\w+)", readme))
    assert names == listed, "README's Observability table and the config disagree"


# --- PromQL: the names a query reads ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('sum by (le) (rate(a_bucket{job="x", le!~"1|2"}[5m]))', {"a_bucket"}),
        (
            "histogram_quantile(0.99, sum without (pod) (rate(a_bucket[$__rate_interval])))",
            {"a_bucket"},
        ),
        ('(max(a{x="by(b)"}) or vector(0)) < 1', {"a"}),
        ("a / on (pod) group_left (node) b", {"a", "b"}),
        ("a > bool 1e3 unless b offset 5m", {"a", "b"}),
        ("rate(a[5m:30s]) * 100 + c:recorded:rate5m", {"a", "c:recorded:rate5m"}),
        ('label_values(a{namespace="$namespace"}, job)', {"a"}),
        ("label_values(namespace)", set()),
        ("sum(a) by (pod) - ignoring(x) b", {"a", "b"}),
        ("max_over_time(a[${window}]) and absent(b)", {"a", "b"}),
    ],
)
def test_metric_names_of_an_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_exported_names_follow_the_family_type() -> None:
    exposition = "# TYPE c counter\nc_total 1\n# TYPE h histogram\n# TYPE g gauge\ng 1\n"
    assert exported_names(exposition) == {
        "c_total", "c_created", "h_bucket", "h_count", "h_sum", "h_created", "g",
    }  # fmt: skip


# --- the chart's dashboard and alerts -----------------------------------------------------------


def declared() -> set[str]:
    """What this operator's metrics module and prometheus_client's default collectors export."""
    assert metrics.PREFIX  # the operator's families are registered by importing the module
    return exported_names(prometheus_client.generate_latest().decode())


def test_every_dashboard_query_names_a_declared_metric() -> None:
    queries = dashboard_queries(DASHBOARD)
    assert len(queries) > 15
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric in {query!r}"
        assert names <= declared(), f"{sorted(names - declared())} in {query!r}"


# A query's outermost aggregation and the labels it keeps: `sum by (reason) (...)`, `max(...)`.
_AGGREGATION = re.compile(r"^\s*(?:sum|max|min|avg|count)\s*(?:by\s*\(([^()]*)\))?\s*\(")


def test_dashboard_legends_name_only_labels_their_query_keeps() -> None:
    """A legend's {{label}} must be one its series have: `sum by (result)` keeps result only, and
    an aggregation without `by` keeps none (its one series gets a constant legend)."""
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            legend, expr = target.get("legendFormat", ""), target["expr"]
            placeholders = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
            aggregation = _AGGREGATION.match(expr)
            if aggregation:
                kept = {label.strip() for label in (aggregation.group(1) or "").split(",")}
                assert placeholders <= kept - {""}, (panel["title"], legend, expr)
            assert legend, f"{panel['title']}: a target without a legend"


@needs_helm
def test_every_alert_names_a_declared_metric() -> None:
    rules = rule_expressions(documents(render(*OBSERVABILITY)))
    assert {"CronleaseNoLeader", "CronleaseScheduleLagHigh", "CronleaseSlotsSkipped"} <= set(rules)
    for name, expr in rules.items():
        names = metric_names(expr)
        assert names, name
        assert names <= declared(), f"{name}: {sorted(names - declared())}"


@needs_helm
def test_skip_alert_ignores_exactly_the_expected_skips() -> None:
    """Forbid and Suspended skips are what the spec asked for (Normal Events); every other
    reason, present or future, alerts."""
    expr = rule_expressions(documents(render(*OBSERVABILITY)))["CronleaseSlotsSkipped"]
    [excluded] = re.findall(r'reason!~"([^"]*)"', expr)
    assert set(excluded.split("|")) == {str(reason) for reason in EXPECTED_SKIPS}
    assert set(SkipReason) - EXPECTED_SKIPS, "some reason must still alert"


@needs_helm
def test_dashboard_and_ksm_config_render_from_their_one_source() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in documents(render(*OBSERVABILITY))}
    dashboard = docs[("ConfigMap", "cronlease-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["cronlease.json"].strip() == DASHBOARD.read_text().strip()
    ksm = docs[("ConfigMap", "cronlease-kube-state-metrics")]
    assert ksm["metadata"]["namespace"] == "monitoring"
    assert ksm["data"]["scheduledjob.yaml"].strip() == KSM_CONFIG.read_text().strip()
    role = docs[("ClusterRole", "cronlease-kube-state-metrics")]
    assert all(set(rule["verbs"]) == {"list", "watch"} for rule in role["rules"])
    binding = docs[("ClusterRoleBinding", "cronlease-kube-state-metrics")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kube-state-metrics", "namespace": "monitoring"}
    ]


@needs_helm
def test_observability_is_off_by_default() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in documents(render())}
    assert not {k for k in kinds if k[0] == "PrometheusRule" or "dashboard" in k[1]}
    assert not {k for k in kinds if "kube-state-metrics" in k[1]}


@needs_helm
@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "prometheusRule.enable=true"],
        ["--set", "dashboards.namespace=Bad_Name"],
        ["--set", "kubeStateMetrics.serviceAccount=Bad_Name"],
    ],
    ids=["typo", "bad-namespace", "bad-service-account"],
)
def test_observability_values_are_checked(bad: list[str]) -> None:
    result = helm("template", "cronlease", str(CHART), *bad, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
