"""The chart's README lists every value with its description and default, generated from the
values schema and values.yaml by hack/chart_readme.py; these tests fail when it is stale."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

import chart_readme

CHART = chart_readme.CHART


def properties(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    for name, prop in node.get("properties", {}).items():
        yield f"{path}.{name}", prop
        yield from properties(prop, f"{path}.{name}")


def test_readme_values_table_is_current() -> None:
    readme = (CHART / "README.md").read_text()
    assert chart_readme.render(readme) == readme, (
        "manifests/helm/cronlease/README.md is stale: run python hack/chart_readme.py"
    )


def test_every_value_is_described() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    nodes = [*properties(schema)]
    for definition in schema.get("definitions", {}).values():
        nodes += properties(definition)
    assert [path for path, prop in nodes if not prop.get("description")] == []


def test_every_default_is_in_the_table() -> None:
    """Each key of values.yaml, down to the leaves the schema names, has its row."""
    readme = (CHART / "README.md").read_text()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def keys(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
        for key, value in values.items():
            yield f"{prefix}{key}"
            if isinstance(value, dict) and value and key not in ("resources", "global"):
                yield from keys(value, f"{prefix}{key}.")

    missing = [key for key in keys(defaults) if f"| `{key}` |" not in readme]
    assert missing == []


def test_a_readme_without_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="markers"):
        chart_readme.render("# a chart\n")
