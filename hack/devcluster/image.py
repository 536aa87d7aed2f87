"""The operator's image (`make image`), run by buildah much as a pod runs it: its entrypoint, its
user, /tmp an emptyDir (a tmpfs), the host's network, and a kubeconfig of the chart's
ServiceAccount mounted read-only. (Not the pod's token mount: kopf's ServiceAccount login always
dials https://kubernetes.default.svc, a name only cluster DNS resolves.)
`OperatorProcess(..., image=Image(...))` starts replicas this way."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUILDAH = REPO / "hack" / "image" / "buildah"  # the project's storage; see that script
KUBECONFIG = "/var/run/cronlease/kubeconfig"  # where the replicas find theirs


class ImageError(RuntimeError):
    pass


def version() -> str:
    with (REPO / "pyproject.toml").open("rb") as file:
        found: str = tomllib.load(file)["project"]["version"]
        return found


def archive() -> Path:
    return REPO / ".cache" / "image" / f"cronlease-{version()}.oci.tar"


def build() -> Path:
    """`make image`: make rebuilds the archive only if an input changed. No buildah or mmdebstrap
    is an error, not a skip: CI installs them (.ci/run)."""
    result = subprocess.run(["make", "-s", "image"], cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        raise ImageError(f"make image failed:\n{result.stdout}{result.stderr}")
    return archive()


def buildah(*args: str) -> str:
    result = subprocess.run([str(BUILDAH), *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise ImageError(f"buildah {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


class Image:
    """One working container of the image archive; every replica runs in it (`buildah run`
    executes in a container the way `exec` does, so replicas share it as pods share an image)."""

    def __init__(self, archive: Path) -> None:
        self.archive = archive
        self.container = buildah("from", "--quiet", f"oci-archive:{archive}").strip()

    @cached_property
    def config(self) -> dict[str, Any]:
        """The image's OCI config: Entrypoint, User, Env, Labels."""
        inspected = json.loads(buildah("inspect", "--type", "container", self.container))
        config: dict[str, Any] = inspected["OCIv1"]["config"]
        return config

    def command(
        self, kubeconfig: Path, name: str, args: Sequence[str], work_dir: Path
    ) -> list[str]:
        """`buildah run` of the image's entrypoint with `args`, as the image's user, with a copy
        of `kubeconfig` it may read (the image's user is not the file's owner)."""
        readable = work_dir / f"{name}.kubeconfig"
        shutil.copyfile(kubeconfig, readable)
        readable.chmod(0o644)
        return [
            str(BUILDAH), "run", "--network", "host",
            "--volume", f"{readable}:{KUBECONFIG}:ro",
            "--mount", "type=tmpfs,destination=/tmp",
            "--env", f"KUBECONFIG={KUBECONFIG}",
            "--env", f"POD_NAME={name}",
            self.container, "--", *self.config["Entrypoint"], *args,
        ]  # fmt: skip

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The entrypoint with `args`, to completion."""
        command = [str(BUILDAH), "run", self.container, "--", *self.config["Entrypoint"], *args]
        return subprocess.run(command, capture_output=True, text=True)

    def operator_pid(self, runner: int) -> int | None:
        """The operator's own process under `buildah run` (pid `runner`): the last of the chain
        buildah run, buildah-chroot-runtime, buildah-chroot-exec, the entrypoint. Signals go to
        it: buildah run does not forward them, and a SIGKILL of it would orphan the operator."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        pid, depth = runner, 0
        while children.get(pid):
            pid, depth = children[pid][0], depth + 1
        return pid if depth == 3 else None

    def root(self) -> Path:
        """The container's root filesystem on the host (buildah mount)."""
        return Path(buildah("mount", self.container).strip())

    def remove(self) -> None:
        buildah("rm", self.container)
