"""The PromQL the chart ships (dashboard queries, alert expressions) and the metric names it reads,
so that tests can hold every name against what a running operator exports.

Not a PromQL parser: it removes what cannot name a metric (strings, label matchers, ranges,
grouping label lists, Grafana variables) and takes every identifier left that is not a function
(followed by "(") or a keyword.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right"}
    | {"bool", "offset", "inf", "nan", "atan2"}
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GRAFANA_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# Grafana's label_values(metric, label) names a label in its last argument; label_values(label)
# names no metric at all.
_LABEL_VALUES = re.compile(r"\blabel_values\s*\(([^,()]*),[^()]*\)")
_LABEL_VALUES_OF_A_LABEL = re.compile(r"\blabel_values\s*\([^,()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])[A-Za-z_:][\w:]*")
# The sample names of a family, by its type, as suffixes of the family's name (a counter's bare
# name selects nothing: its samples are name_total and name_created).
_SUFFIXES = {
    "gauge": ("",),
    "unknown": ("",),
    "untyped": ("",),
    "stateset": ("",),
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "info": ("_info",),
}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression (PromQL, or a Grafana query with variables) selects."""
    text = _STRINGS.sub('""', expr)
    text = _GRAFANA_VARIABLES.sub("0", text)
    text = _MATCHERS.sub("{}", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    text = _LABEL_VALUES.sub(lambda m: f"({m.group(1)})", text)
    text = _LABEL_VALUES_OF_A_LABEL.sub("", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in KEYWORDS:
            continue
        names.add(match.group())
    return names


def exported_names(exposition: str) -> set[str]:
    """Every sample name the families in a /metrics text can have, declared families with no
    sample yet (a labelled counter nobody incremented) included."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(family.name + suffix for suffix in _SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def dashboard_queries(path: Path) -> list[str]:
    """Every query of a Grafana dashboard: its panels' targets (rows' nested panels included)
    and its templating variables'."""
    dashboard = json.loads(path.read_text())
    queries = [
        target["expr"]
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def _panels(panels: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def rule_expressions(documents: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The expression of every alerting and recording rule in rendered PrometheusRules, by name."""
    return {
        rule.get("alert") or rule["record"]: rule["expr"]
        for doc in documents
        if doc and doc.get("kind") == "PrometheusRule"
        for group in doc["spec"]["groups"]
        for rule in group["rules"]
    }
