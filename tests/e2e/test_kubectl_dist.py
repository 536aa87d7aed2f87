"""The plugin installed as users install it (no cluster): its wheel built by hack/plugin_dist.py
(`make plugin-dist`) into a fresh venv, offline from the wheels fetched beside it, holds none of
the operator's runtime and completes `kubectl cronlease <TAB>` through kubectl itself; the krew
archive (`make krew`) matches its manifest's sha256 and runs from where krew unpacks it, with no
package installed at all.

In tests/e2e for its cost (a wheel build, a venv), not for a cluster: it starts none. Offline
after the first run: the build uses the dev environment's setuptools, and the dependencies'
wheels are fetched once into the repository's cache (WHEELS, shared with `make plugin-dist`)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / ".venv" / "bin" / "kubectl"
WHEELS = REPO / ".cache" / "plugin-dist" / "wheels"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
COMMANDS = ["run-now", "next", "history", "suspend", "resume", "backfill", "replay"]
COMMANDS += ["dead-letters", "audit", "adopt", "leader"]


def run(*argv: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
        check=False,
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plugin-dist")
    build = [sys.executable, REPO / "hack" / "plugin_dist.py", "wheel", "--out", out]
    built = run(*build, "--wheels", WHEELS)
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(scope="module")
def venv(dist: Path) -> Path:
    env = dist / "venv"
    assert run(sys.executable, "-m", "venv", env).returncode == 0
    (wheel,) = dist.glob(f"kubectl_cronlease-{VERSION}-py3-none-any.whl")
    installed = run(
        env / "bin" / "pip",
        "install",
        "--quiet",
        "--no-index",  # offline: the wheels fetched for it, nothing else
        "--find-links",
        WHEELS,
        wheel,
    )
    assert installed.returncode == 0, installed.stderr
    return env


def test_the_wheel_installs_alone_and_reports_its_version(venv: Path) -> None:
    shown = run(venv / "bin" / "kubectl-cronlease", "--version")
    assert (shown.returncode, shown.stdout) == (0, f"kubectl-cronlease {VERSION}\n")
    for module in ("kopf", "aiohttp", "prometheus_client", "cronlease.core.decide.reconcile"):
        probe = run(venv / "bin" / "python", "-c", f"import {module}")
        assert probe.returncode == 1, module
        assert "ModuleNotFoundError" in probe.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    tooling = {"pip", "setuptools", "pkg_resources", "_distutils_hack"}
    size = sum(
        f.stat().st_size
        for f in site.rglob("*")
        if f.is_file() and f.relative_to(site).parts[0].split("-")[0] not in tooling
    )
    print(f"installed: {size / 2**20:.1f} MiB in site-packages (pip and setuptools aside)")
    # The official client alone is most of it; the operator's stack would add kopf, aiohttp,
    # prometheus-client and their dependencies.
    assert size < 64 * 2**20


def test_kubectl_completes_the_plugin_through_its_completer(venv: Path) -> None:
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    listed = run(KUBECTL, "__complete", "cronlease", "", PATH=path, KUBECONFIG=os.devnull)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines[:-1]] == COMMANDS
    assert lines[-1] == ":4"  # ShellCompDirectiveNoFileComp
    flags = run(KUBECTL, "__complete", "cronlease", "audit", "--out", PATH=path)
    assert flags.stdout.splitlines()[0] == "--output"
    values = run(KUBECTL, "__complete", "cronlease", "history", "-o", "", PATH=path)
    assert values.stdout.splitlines()[:-1] == ["json", "yaml", "wide", "name"]


def test_the_krew_archive_is_its_manifest_s_and_runs_unpacked(dist: Path, venv: Path) -> None:
    built = run(
        sys.executable,
        REPO / "hack" / "plugin_dist.py",
        "krew",
        "--out",
        dist,
        "--wheels",
        WHEELS,
        "--url-base",
        "https://releases.invalid/v" + VERSION,
    )
    assert built.returncode == 0, built.stderr
    manifest = yaml.safe_load((dist / "cronlease.yaml").read_text())
    archive = dist / f"kubectl-cronlease-v{VERSION}.tar.gz"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == f"https://releases.invalid/v{VERSION}/{archive.name}"
    assert manifest["spec"]["version"] == f"v{VERSION}"
    unpacked = dist / "krew"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    plugin = unpacked / platform["bin"]
    # Only an interpreter on the PATH: no venv, no site-packages (krew installs no packages).
    bare = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
        "PYTHONNOUSERSITE": "1",
    }
    shown = subprocess.run(
        [str(plugin), "--version"], capture_output=True, text=True, env=bare, timeout=60
    )
    assert (shown.returncode, shown.stdout) == (0, f"kubectl-cronlease {VERSION}\n")
    lint = subprocess.run(
        [str(plugin), "next", "--schedule", "0 9 * * 1-5", "--tz", "Europe/Berlin", "-o", "yaml"],
        capture_output=True,
        text=True,
        env=bare,
        timeout=60,
    )
    assert lint.returncode == 0, lint.stderr
    assert yaml.safe_load(lint.stdout)["timeZone"] == "Europe/Berlin"
    unreachable = subprocess.run(  # the client imports from the archive too
        [str(plugin), "history", "x", "--kubeconfig", str(unpacked / "none")],
        capture_output=True,
        text=True,
        env=bare,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("error: cannot load the kubeconfig")
    completer = unpacked / "kubectl_complete-cronlease"
    completer.symlink_to(plugin.name)
    completed = subprocess.run(
        [str(completer), "aud"], capture_output=True, text=True, env=bare, timeout=60
    )
    assert completed.stdout.splitlines()[0].startswith("audit\t")
