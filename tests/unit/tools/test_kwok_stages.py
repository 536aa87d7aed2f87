"""The kwok stages' invariants that an e2e run would only show as flakes, the pod template's
checks, and when devcluster restarts kwok for a changed stages file."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import kwok
from devcluster.cluster import Cluster, _stages_current


def pod_stages() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all(kwok.STAGES.read_text())
    return {
        doc["metadata"]["name"]: doc for doc in docs if doc["spec"]["resourceRef"]["kind"] == "Pod"
    }


def test_exactly_one_terminal_stage_matches_a_running_pod() -> None:
    # kwok picks at random among matching stages: the two must split every pod between them.
    succeed, fail = (
        pod_stages()[name]["spec"]["selector"]["matchExpressions"]
        for name in ("pod-succeed", "pod-fail")
    )
    assert len(succeed) == len(fail)
    differ = [(s, f) for s, f in zip(succeed, fail, strict=True) if s != f]
    assert len(differ) == 1, differ
    [(on_succeed, on_fail)] = differ
    assert on_succeed["key"] == on_fail["key"]
    assert on_succeed["values"] == on_fail["values"]
    assert {on_succeed["operator"], on_fail["operator"]} == {"In", "NotIn"}


def test_pod_template_keeps_its_old_annotations_by_default() -> None:
    assert kwok.kwok_pod_template()["metadata"]["annotations"] == {
        "kwok.cronlease.io/duration": "0s",
        "kwok.cronlease.io/result": "Succeeded",
    }
    chosen = kwok.kwok_pod_template(fail_attempts=(1, 2), exit_code=42)["metadata"]["annotations"]
    assert chosen["kwok.cronlease.io/fail-attempts"] == "1,2"
    assert chosen["kwok.cronlease.io/exit-code"] == "42"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"fail_attempts": (0,)}, "fail_attempts"),
        ({"fail_attempts": ("1",)}, "fail_attempts"),
        ({"exit_code": 0}, "exit_code"),
        ({"exit_code": 256}, "exit_code"),
        ({"exit_code": True}, "exit_code"),
    ],
)
def test_pod_template_rejects_what_kwok_could_not_play(arguments: Any, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        kwok.kwok_pod_template(**arguments)


def cluster_in(directory: Path, config: Path) -> Cluster:
    cluster = Cluster(directory / "kubeconfig", "https://127.0.0.1:1", directory, directory)
    cluster.commands[kwok.NAME] = ["kwok", f"--config={config}"]
    return cluster


def test_kwok_is_current_only_while_it_runs_a_copy_of_these_stages(tmp_path: Path) -> None:
    copy = tmp_path / kwok.STAGES.name
    cluster = cluster_in(tmp_path, copy)
    assert not _stages_current(cluster)  # no copy: what kwok plays is unknown
    shutil.copyfile(kwok.STAGES, copy)
    assert _stages_current(cluster)
    copy.write_text(kwok.STAGES.read_text() + "# changed\n")
    assert not _stages_current(cluster)
    # Started by a devcluster that ran kwok on a checkout's own file: a stale copy proves nothing.
    shutil.copyfile(kwok.STAGES, copy)
    assert not _stages_current(cluster_in(tmp_path, kwok.STAGES))
