"""Output as kubectl prints it: a table by default (upper-case headers, columns three spaces
apart, ages like `5m`), `-o json|yaml`, colour only when stdout is a terminal, and a progress line
on stderr only when stderr is one. Pure but for the writers handed in."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

import yaml

from cronlease.kubectl.errors import PluginError

FORMATS = ("table", "json", "yaml", "wide")
_COLOURS = {"green": "32", "yellow": "33", "red": "31", "dim": "2", "bold": "1"}


def colour(text: str, name: str, enabled: bool) -> str:
    return f"\033[{_COLOURS[name]}m{text}\033[0m" if enabled and name in _COLOURS else text


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    colours: Sequence[str] = (),
    enabled: bool = False,
) -> str:
    """kubectl's layout: each column as wide as its widest cell, three spaces apart; `colours`
    names a colour per row (padding is computed on the plain text)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = ["   ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for index, row in enumerate(rows):
        line = "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        lines.append(colour(line, colours[index], enabled) if index < len(colours) else line)
    return "\n".join(lines)


def age(instant: datetime | None, now: datetime) -> str:
    """kubectl's short age: 45s, 12m, 3h, 2d (and `<unknown>`)."""
    if instant is None:
        return "<unknown>"
    seconds = int((now - instant).total_seconds())
    if seconds < 0:
        return f"in {age(now, instant)}"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= 120):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def relative(instant: datetime, now: datetime) -> str:
    """`in 5m` for a time to come, `5m ago` for a past one."""
    return f"in {age(now, instant)}" if instant > now else f"{age(instant, now)} ago"


def dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False, default=str)
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip()
    raise PluginError(f"unknown output format {fmt!r}: use json or yaml")


class Progress:
    """A one-line spinner with elapsed seconds on stderr, only on a terminal."""

    FRAMES = "|/-\\"

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.started = time.monotonic()
        self.ticks = 0

    def update(self, message: str) -> None:
        if not self.enabled:
            return
        frame = self.FRAMES[self.ticks % len(self.FRAMES)]
        self.ticks += 1
        elapsed = time.monotonic() - self.started
        self.stream.write(f"\r\033[K{frame} {message} ({elapsed:.0f}s)")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self.ticks:
            self.stream.write("\r\033[K")
            self.stream.flush()
