"""Every third-party module the operator imports is declared in pyproject.toml, not merely brought
by another dependency (aiohttp and yarl arrive with kopf, yet the operator calls them itself): a
dependency that stops bringing it would break the operator, and the image installs only the
declared closure."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
OPERATOR = REPO / "operator" / "cronlease"


def imported_modules(source: str) -> set[str]:
    """Top-level names of the absolute imports in `source`."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def third_party(modules: set[str]) -> set[str]:
    return {m for m in modules if m not in sys.stdlib_module_names and m not in {"cronlease"}}


def declared() -> set[str]:
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}


def undeclared(modules: set[str], dependencies: set[str]) -> dict[str, list[str]]:
    """Each module whose distributions (in this environment) include no declared dependency."""
    providers = packages_distributions()
    missing = {}
    for module in sorted(modules):
        distributions = [canonicalize_name(d) for d in providers.get(module, [])]
        if not set(distributions) & dependencies:
            missing[module] = distributions
    return missing


def test_every_import_of_the_operator_is_a_declared_dependency() -> None:
    modules = set()
    for path in sorted(OPERATOR.glob("*.py")):
        modules |= third_party(imported_modules(path.read_text()))
    assert {"kopf", "aiohttp", "yarl"} <= modules  # the scan sees the operator's imports
    assert undeclared(modules, declared()) == {}


def test_an_import_only_a_dependency_brings_is_reported() -> None:
    modules = third_party(imported_modules("import aiohttp\nfrom yarl import URL\nimport json\n"))
    assert modules == {"aiohttp", "yarl"}
    assert undeclared(modules, {"kopf", "yarl"}) == {"aiohttp": ["aiohttp"]}
