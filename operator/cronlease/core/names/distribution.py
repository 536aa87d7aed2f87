"""The installed distribution's version, for the operator's and the plugin's --version: pure
(importlib.metadata alone), so that the plugin, which imports none of the operator's runtime,
shares it."""

from __future__ import annotations


def version(*names: str) -> str:
    """The version of the first of the distributions `names` (default: the operator's) that is
    installed; a source tree run without installing has none."""
    from importlib import metadata  # when asked: the plugin's completion builds its parser too

    for name in names or ("cronlease",):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown (not installed)"
