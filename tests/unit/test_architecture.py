"""The layers' contracts (pyproject.toml's import-linter section, run by `make lint`) hold on the
tree, and each one breaks when an import it forbids is planted in a copy of the package: the
contracts are checked, not only written down (docs/architecture.md says what each layer is)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "cronlease"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts, on the package found under `source_root`."""
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(REPO / "pyproject.toml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=source_root,
        check=False,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(REPO / "operator")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# (module to plant in, the line planted, the contract it breaks)
PLANTS = [
    (
        "core/decide/reconcile.py",
        "from cronlease.shell import metrics",
        "Layers: app above shell above core",
    ),
    ("shell/writer.py", "from cronlease.app import options", "Layers: app above shell above core"),
    ("kubectl/views.py", "from cronlease.shell import model", "The kubectl plugin imports only"),
    ("core/specs/spec.py", "from cronlease.core.decide import decision", "The core, in order"),
    ("core/schedule/cron.py", "from cronlease.core.names import naming", "The core, in order"),
    ("core/names/jobinfo.py", "import time", "The core is pure"),
    ("core/bodies/runenv.py", "import logging", "The core is pure"),
    ("shell/backoff.py", "from cronlease.shell import writer", "No circles"),
]


@pytest.mark.parametrize(("module", "line", "contract"), PLANTS)
def test_a_planted_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    copy = tmp_path / "cronlease"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / module
    target.write_text(f"{target.read_text()}\n{line}  # planted\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    broken = [row for row in result.stdout.splitlines() if row.endswith("BROKEN")]
    assert [row for row in broken if row.startswith(contract)], result.stdout
