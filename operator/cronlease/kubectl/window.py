"""Instants and windows as a user types them (`--from`, `--to`): RFC 3339 (`2026-12-01T09:00Z`,
an offset, or a date for its midnight in UTC), `now`, or an age (`90m`, `2h`, `7d`: that long
before now). Pure, "now" passed in; anything else is a one-line PluginError."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from cronlease.core.names.naming import normalise
from cronlease.core.specs.spec import RUN_AT_EARLIEST, RUN_AT_LATEST
from cronlease.kubectl.errors import PluginError

_AGE = re.compile(r"^(\d{1,9})([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# DNS-1123 subdomain, as Kubernetes names most objects.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def parse_instant(text: str, now: datetime, flag: str) -> datetime:
    value = text.strip()
    if value == "now":
        return normalise(now)
    age = _AGE.match(value)
    if age:
        return normalise(now - timedelta(seconds=int(age.group(1)) * _UNITS[age.group(2)]))
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise PluginError(
            f"{flag}: {text!r} is not a time (RFC 3339 like 2026-12-01T09:00:00Z, a date, "
            "'now', or an age like 90m, 2h, 7d)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)  # never the host's zone
    if not RUN_AT_EARLIEST <= parsed <= RUN_AT_LATEST:
        raise PluginError(f"{flag}: {text!r} is outside 1970..2286")
    return normalise(parsed)


def parse_window(low: str, high: str, now: datetime) -> tuple[datetime, datetime]:
    start, end = parse_instant(low, now, "--from"), parse_instant(high, now, "--to")
    if end < start:
        raise PluginError(f"--to ({high}) is before --from ({low})")
    return start, end


def check_name(name: str, what: str = "name") -> str:
    if not _NAME.match(name):
        raise PluginError(
            f"invalid {what} {name!r}: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return name
