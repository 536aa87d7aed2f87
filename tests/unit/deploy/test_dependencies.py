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

REPO = Path(__file__).resolve().parents[3]
OPERATOR = REPO / "operator" / "cronlease"
# The kubectl plugin: its own optional group (`plugin`), installed only in its own environment.
PLUGIN = OPERATOR / "kubectl"
# Never where the operator runs: kopf imports it whenever it is installed (about 17 MB).
PLUGIN_ONLY = {"kubernetes"}


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


def declared(group: str | None = None) -> set[str]:
    """The runtime dependencies, or those of an optional group."""
    with (REPO / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    requirements = project["optional-dependencies"][group] if group else project["dependencies"]
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def undeclared(modules: set[str], dependencies: set[str]) -> dict[str, list[str]]:
    """Each module whose distributions (in this environment) include no declared dependency. A
    module not installed here (the plugin's client, which this environment must not hold) is
    taken to come from the distribution of its own name."""
    providers = packages_distributions()
    missing = {}
    for module in sorted(modules):
        distributions = [canonicalize_name(d) for d in providers.get(module, [module])]
        if not set(distributions) & dependencies:
            missing[module] = distributions
    return missing


def operator_sources() -> list[Path]:
    """Every module of the operator's layers (the plugin's own package aside)."""
    return sorted(p for p in OPERATOR.rglob("*.py") if PLUGIN not in p.parents)


def imports_of(paths: list[Path]) -> set[str]:
    modules: set[str] = set()
    for path in paths:
        modules |= third_party(imported_modules(path.read_text()))
    return modules


def test_every_import_of_the_operator_is_a_declared_dependency() -> None:
    modules = imports_of(operator_sources())
    assert {"kopf", "aiohttp", "yarl"} <= modules  # the scan sees the operator's imports
    assert undeclared(modules, declared()) == {}


def test_the_plugin_declares_its_imports_in_its_own_group() -> None:
    modules = imports_of(sorted(PLUGIN.glob("*.py")))
    assert {"kubernetes", "yaml"} <= modules  # the scan sees the plugin's imports
    assert undeclared(modules, declared() | declared("plugin")) == {}


def test_the_operator_never_gets_the_plugin_s_client() -> None:
    """Not a runtime or dev dependency (the dev venv runs the operator in e2e and benches), and
    no operator module imports it or the plugin."""
    assert declared("plugin") >= PLUGIN_ONLY
    assert not PLUGIN_ONLY & (declared() | declared("dev"))
    assert not PLUGIN_ONLY & imports_of(operator_sources())
    for path in operator_sources():
        tree = ast.parse(path.read_text())
        imported = {
            alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names
        }
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.startswith("cronlease.kubectl")}, path


def test_an_import_only_a_dependency_brings_is_reported() -> None:
    modules = third_party(imported_modules("import aiohttp\nfrom yarl import URL\nimport json\n"))
    assert modules == {"aiohttp", "yarl"}
    assert undeclared(modules, {"kopf", "yarl"}) == {"aiohttp": ["aiohttp"]}
