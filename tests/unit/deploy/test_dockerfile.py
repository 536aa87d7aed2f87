"""The Dockerfile's defaults a `docker build .` relies on: `make image` passes the version, a Docker
user gets the default, so the default must be the project's version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_dockerfile_labels_the_project_version_by_default() -> None:
    with (REPO / "pyproject.toml").open("rb") as file:
        version = tomllib.load(file)["project"]["version"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.findall(r"^ARG VERSION=(\S+)$", dockerfile, re.MULTILINE) == [version]
    assert "org.opencontainers.image.version=${VERSION}" in dockerfile
