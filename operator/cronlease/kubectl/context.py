"""What every command gets (the flags kubectl's conventions name, the API, where to write), and
the one way commands wait for the operator: polling with a deadline, a progress line on a
terminal."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.output import Progress, dump
from cronlease.kubectl.window import check_name

if TYPE_CHECKING:  # the client is imported only where a command reaches a cluster (cli.connect)
    from cronlease.kubectl.client import Api

T = TypeVar("T")
POLL_SECONDS = 0.5


@dataclass
class Context:
    """What every command gets: the flags kubectl's conventions name, and where to write."""

    connect: Callable[[], Api]
    namespace: str | None
    all_namespaces: bool
    output: str
    out: TextIO
    err: TextIO
    colour: bool
    timeout: float = 120.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    @functools.cached_property
    def api(self) -> Api:
        return self.connect()

    @property
    def ns(self) -> str:
        if self.namespace is not None:
            return check_name(self.namespace, "namespace")
        return self.api.default_namespace

    @property
    def scope(self) -> str | None:
        """The namespace to list in; None for all (-A)."""
        return None if self.all_namespaces else self.ns

    def server_now(self) -> datetime:
        """The API server's time (the Date of its latest answer, so call it after one): what
        the operator decides on; the host's clock (`clock`) may be off either way."""
        now = self.api.server_now()
        if now is None:
            raise PluginError("the API server's answers carry no Date header: its time is unknown")
        return now

    def print(self, text: str) -> None:
        self.out.write(text + "\n")

    def structured(self) -> bool:
        return self.output in ("json", "yaml")

    @property
    def wide(self) -> bool:
        """`-o wide`: the table with more columns, as kubectl's."""
        return self.output == "wide"

    def names(self, resource: str, names: list[str]) -> None:
        """`-o name`: `resource/name` a line, as `kubectl get -o name` prints, for piping."""
        for name in names:
            self.print(f"{resource}/{name}")

    def emit(self, data: Any) -> None:
        self.print(dump(data, self.output))


def wait(ctx: Context, what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll `probe` until it returns something, with a progress line; PluginError on timeout."""
    progress = Progress(ctx.err)
    deadline = time.monotonic() + timeout
    try:
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() >= deadline:
                raise PluginError(f"timed out after {timeout:.0f}s waiting for {what}")
            progress.update(f"waiting for {what}")
            time.sleep(POLL_SECONDS)
    finally:
        progress.done()
