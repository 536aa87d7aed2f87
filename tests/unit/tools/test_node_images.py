"""The real node's image names (hack/devcluster/node.py): an imported image must carry the name
the kubelet asks the CRI for, or its pods never start (ErrImageNeverPull)."""

from __future__ import annotations

import pytest

from devcluster.node import normalised


@pytest.mark.parametrize(
    ("reference", "as_the_kubelet_asks"),
    [
        ("cronlease:0.1.0", "docker.io/library/cronlease:0.1.0"),
        ("team/tool:1", "docker.io/team/tool:1"),
        ("localhost/cronlease-pause:1", "localhost/cronlease-pause:1"),
        ("ghcr.io/org/app:2", "ghcr.io/org/app:2"),
        ("registry:5000/app:3", "registry:5000/app:3"),
        ("docker.io/library/busybox:1", "docker.io/library/busybox:1"),
    ],
)
def test_an_imported_image_is_named_as_the_kubelet_asks_for_it(
    reference: str, as_the_kubelet_asks: str
) -> None:
    assert normalised(reference) == as_the_kubelet_asks
