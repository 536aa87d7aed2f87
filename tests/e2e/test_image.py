"""The operator's image (`make image`, from the Dockerfile) runs here as in a pod: its entrypoint,
its user, the chart's ServiceAccount credentials mounted where a pod has them, /tmp a tmpfs.

It was installed from the wheels of the project's declared dependencies alone (`--no-index`), so
an operator that starts from it imports nothing undeclared. Building it needs buildah and
mmdebstrap; without them these tests fail (`make image` says why), they do not skip.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.image import Image, build, version
from devcluster.replica import OperatorProcess
from kube import (
    Kube,
    assert_each_slot_once,
    jobs_of,
    leader_of,
    scheduledjob,
    status_of,
    takeover_seconds,
    wait_for,
    wait_for_runs_by,
)

SHELLS = {"sh", "bash", "dash", "ash", "zsh", "busybox"}
PACKAGE_MANAGERS = {"dpkg", "apt", "apt-get", "pip", "pip3"}


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    built = Image(build())
    yield built
    built.remove()


def executables(root: Path) -> set[str]:
    """Names of the files in the image that anyone may execute."""
    found = set()
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if path.is_file() and path.stat().st_mode & 0o111:
                found.add(name)
    return found


def world_writable(root: Path) -> set[str]:
    """Directories of the image anyone may write to."""
    return {
        str(Path(directory).relative_to(root))
        for directory, _, _ in os.walk(root)
        if Path(directory).stat().st_mode & 0o002
    }


def written_by(root: Path, uid: int, since: float) -> list[str]:
    """What `uid` wrote in the image after `since`: entries it owns and changed. With no other
    writable place (test_image_is_nonroot_shell_free_and_versioned), an operator that runs as
    `uid` and wrote nothing needs no writable root filesystem. (buildah's own mount points are
    root's.)"""
    changed = []
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            info = Path(directory, name).lstat()
            if info.st_uid == uid and info.st_mtime > since:
                changed.append(str(Path(directory, name).relative_to(root)))
    return changed


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def test_image_is_nonroot_shell_free_and_versioned(image: Image) -> None:
    config = image.config
    assert config["User"] == "65532:65532"
    assert config["Labels"]["org.opencontainers.image.version"] == version()
    entrypoint = config["Entrypoint"]
    assert (image.root() / entrypoint[0].lstrip("/")).is_file(), entrypoint  # exec form
    assert executables(image.root()) & (SHELLS | PACKAGE_MANAGERS) == set()
    assert world_writable(image.root()) <= {"tmp"}  # where the chart mounts an emptyDir
    reported = image.run("--version")
    assert reported.returncode == 0, reported.stderr
    assert version() in reported.stdout
    # The same image is a multi-step run's heartbeat sidecar (args: [heartbeat]).
    sidecar = image.run("heartbeat", "--help")
    assert sidecar.returncode == 0, sidecar.stderr
    assert "CRONLEASE_HEARTBEAT_LEASE" in sidecar.stdout


def test_operator_from_the_image_runs_on_time_and_fails_over(
    kube: Kube,
    namespace: str,
    started: list[OperatorProcess],
    operator_kubeconfig: Path,
    image: Image,
    tmp_path: Path,
) -> None:
    since = time.time()
    for i in range(2):
        started.append(OperatorProcess(operator_kubeconfig, tmp_path, f"image-{i}", image=image))
        started[-1].start()
    assert [uid_of(replica.pid) for replica in started] == [65532, 65532]

    # Smoke: the leader, from the image, runs a seconds-long schedule and records the runs.
    kube.apply(
        scheduledjob(
            "img",
            namespace,
            schedule="* * * * * *",
            startingDeadlineSeconds=30,
            successfulJobsHistoryLimit=100,
        )
    )
    first = leader_of(started, kube)
    wait_for(lambda: len(jobs_of(kube, namespace, "img")) >= 3, 20, "runs from the image")
    wait_for(lambda: status_of(kube, namespace, "img").get("runsCreated"), 10, "the status")

    # Failover: the leader's process is killed; the other replica takes over, no slot lost.
    first.stop(signal.SIGKILL)
    takeover_seconds(kube, str(first.identity()), 20)
    second = leader_of(started, kube)
    assert second is not first
    wait_for_runs_by(second, kube, namespace, "img")
    jobs = jobs_of(kube, namespace, "img")
    assert_each_slot_once(jobs, every=1)
    writers = {j["metadata"]["annotations"]["cronlease.io/leader"] for j in jobs}
    assert writers == {first.identity(), second.identity()}

    # It wrote nothing to the image's filesystem (/tmp is a tmpfs here, an emptyDir in the chart):
    # a read-only root filesystem is no obstacle.
    assert written_by(image.root(), 65532, since) == []
