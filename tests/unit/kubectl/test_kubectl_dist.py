"""The plugin's own distribution (hack/plugin_dist.py): its modules are the import closure of
cronlease.kubectl and pull none of the operator's runtime; its metadata follows the project's;
the krew archive is reproducible from its files and the manifest's fields are the archive's.
(tests/e2e/test_kubectl_dist.py builds and installs the real wheel and archive, and checks the
manifest's sha256 against it.)"""

from __future__ import annotations

import io
import tarfile
import tomllib
from pathlib import Path

import pytest

import plugin_dist

# What only the operator runs on; none of it may be imported by a module the plugin ships.
OPERATOR_RUNTIME = {"kopf", "aiohttp", "yarl", "prometheus_client", "orjson"}


def test_the_closure_is_the_pure_core_and_the_client() -> None:
    found = plugin_dist.closure()
    assert {
        "cronlease.kubectl.cli",
        "cronlease.kubectl.client",
        "cronlease.kubectl.completion",
        "cronlease.core.schedule.cron",
        "cronlease.core.names.naming",
    } <= set(found)
    assert plugin_dist.third_party(found) == plugin_dist.THIRD_PARTY
    for module, imported in found.items():
        assert not imported & OPERATOR_RUNTIME, module
    # decide() and the shell stay out: first_cursor lives in cronlease.core.names.naming for that.
    assert not {
        "cronlease.core.decide.reconcile",
        "cronlease.shell.applier",
        "cronlease.app.main",
    } & set(found)


def test_the_metadata_follows_the_project() -> None:
    meta = plugin_dist.project()
    packages = {"cronlease", "cronlease.core", "cronlease.kubectl"}
    document = tomllib.loads(plugin_dist.pyproject(meta, packages))
    assert document["tool"]["setuptools"]["packages"] == sorted(packages)
    staged = document["project"]
    assert staged["name"] == "kubectl-cronlease"
    assert staged["version"] == meta["version"]
    assert staged["requires-python"] == meta["requires-python"]
    names = {plugin_dist._requirement_name(r).strip().lower() for r in staged["dependencies"]}
    assert names == {"kubernetes", "pyyaml", "urllib3", "croniter", "tzdata"}
    croniter = next(r for r in meta["dependencies"] if r.startswith("croniter"))
    assert croniter in staged["dependencies"]  # the operator's bounds, not a copy
    assert staged["scripts"] == {
        "kubectl-cronlease": "cronlease.kubectl.cli:main",
        "kubectl_complete-cronlease": "cronlease.kubectl.completion:main",
    }


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    executable = tmp_path / "kubectl-cronlease"
    executable.write_bytes(b"#!/usr/bin/env python3\nprint('hi')\n")
    return plugin_dist.build_archive(executable, tmp_path, "1.2.3")


def test_the_archive_holds_the_executable_and_the_licence(archive: Path, tmp_path: Path) -> None:
    with tarfile.open(archive) as tar:
        members = {m.name: (m.mode, m.mtime, m.uid) for m in tar.getmembers()}
    assert members == {"kubectl-cronlease": (0o755, 0, 0), "LICENSE": (0o644, 0, 0)}
    again = tmp_path / "again"
    again.mkdir()
    copy = plugin_dist.build_archive(tmp_path / "kubectl-cronlease", again, "1.2.3")
    assert copy.read_bytes() == archive.read_bytes()  # the sha depends on the files alone


def test_the_manifest_is_the_archive_s(archive: Path) -> None:
    data = plugin_dist.manifest(archive, "1.2.3", "https://releases/kubectl-cronlease.tar.gz")
    assert (data["apiVersion"], data["kind"]) == (plugin_dist.KREW_API, "Plugin")
    assert data["metadata"] == {"name": "cronlease"}
    spec = data["spec"]
    assert spec["version"] == "v1.2.3"
    assert 0 < len(spec["shortDescription"]) <= 60
    assert "kubectl_complete-cronlease" in spec["caveats"]
    (platform,) = spec["platforms"]
    assert platform["uri"] == "https://releases/kubectl-cronlease.tar.gz"
    assert platform["bin"] == "kubectl-cronlease"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    assert {f["from"] for f in platform["files"]} == names
    assert platform["bin"] in names
    (expression,) = platform["selector"]["matchExpressions"]
    assert (expression["key"], expression["operator"]) == ("os", "In")
    assert set(expression["values"]) == {"linux", "darwin"}


def test_the_written_manifest_reads_back() -> None:
    import yaml

    data = plugin_dist.manifest(Path(__file__), "1.2.3", "https://x/a.tar.gz")
    text = yaml.dump(data, Dumper=plugin_dist._block_dumper(), sort_keys=False)
    assert yaml.safe_load(io.StringIO(text)) == data
    assert "caveats: |" in text  # multi-line texts as literal blocks
