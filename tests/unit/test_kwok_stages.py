"""When devcluster restarts kwok for a changed stages file."""

from __future__ import annotations

import shutil
from pathlib import Path

from devcluster import kwok
from devcluster.cluster import Cluster, _stages_current


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
