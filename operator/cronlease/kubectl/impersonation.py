"""kubectl's impersonation flags (--as, --as-group, --as-uid), checked as kubectl checks them:
groups or a uid without a user are refused, since the API server would refuse them anyway, with
a less clear message."""

from __future__ import annotations

from dataclasses import dataclass

from cronlease.kubectl.errors import EXIT_USAGE, PluginError


@dataclass(frozen=True)
class Impersonation:
    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""


def impersonation(user: str | None, groups: list[str], uid: str | None) -> Impersonation | None:
    """The identity to act as, or None for the kubeconfig's own."""
    if not user:
        if groups or uid:
            raise PluginError("--as-group and --as-uid need --as (the user to act as)", EXIT_USAGE)
        return None
    for group in groups:
        if not group:
            raise PluginError("--as-group: must not be empty", EXIT_USAGE)
    return Impersonation(user, tuple(groups), uid or "")
