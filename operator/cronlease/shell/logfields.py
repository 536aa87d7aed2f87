"""What a log record is about, as fields: the object (namespace, name), the controller and the
reconcile it is part of, the run and slot, without a word of any log line's text changed.

One mechanism: a context variable holds the fields of the work in progress. The keyed loop binds
the controller, the object of its key and a reconcile ID around each reconcile, the applier binds
the run and slot around each creation, and the JSON formatter writes them on every record logged
meanwhile, whichever module logs it (asyncio tasks inherit them). kopf's own per-object
records carry their object (`k8s_ref`), which becomes the same fields.

`--log-format json` writes them with controller-runtime's names (its zap encoder's `ts`,
`level`, `logger`, `msg`, `error`, `stacktrace`; its reconciler's `controller`, `namespace`,
`name`, `reconcileID`), so the log queries platform teams keep for Go operators work here;
`slot` and `run` are ours."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

# Never mutated: each binding sets a new mapping, so the shared empty default is safe.
_FIELDS: ContextVar[Mapping[str, object]] = ContextVar(
    "cronlease_log_fields",
    default=MappingProxyType({}),
)
# The object fields, in the order a JSON line shows them.
ORDER = ("controller", "namespace", "name", "reconcileID", "run", "slot")
# zap's level names.
LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "fatal",
}
# What every LogRecord has; any other attribute came from a caller's `extra` and is shown.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    # kopf's: its settings and whether it posts the record as an Event; its object is mapped.
    "settings",
    "k8s_skip",
    "k8s_ref",
}


@contextlib.contextmanager
def bound(**fields: object) -> Iterator[None]:
    """`fields` on every record logged inside (on top of those already bound)."""
    token = _FIELDS.set({**_FIELDS.get(), **fields})
    try:
        yield
    finally:
        _FIELDS.reset(token)


def current() -> Mapping[str, object]:
    return _FIELDS.get()


class JsonFormatter(logging.Formatter):
    """One JSON object a line, with controller-runtime's field names."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _text(datetime.fromtimestamp(record.created, UTC)),
            "level": LEVELS.get(record.levelno) or record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        # Formatted in the logging call's own context (handlers here run synchronously): the
        # fields bound there, and kopf's object reference for its per-object records.
        fields = dict(current())
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict):
            for key in ("namespace", "name"):
                if isinstance(ref.get(key), str):
                    fields.setdefault(key, ref[key])
        entry.update((key, fields[key]) for key in ORDER if key in fields)
        entry.update((k, v) for k, v in fields.items() if k not in entry)
        if isinstance(ref, dict):
            entry["object"] = ref  # kopf's: the object's apiVersion, kind and uid too
        entry.update((k, v) for k, v in vars(record).items() if k not in _STANDARD)
        if record.exc_info and record.exc_info[1] is not None:
            entry["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
            entry["stacktrace"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["stacktrace"] = record.stack_info
        return json.dumps(entry, default=_text, ensure_ascii=False)


def _text(value: object) -> str:
    """A field's value as text: instants in RFC 3339 UTC (a slot as its Job's annotation has
    it), bound as datetimes so that a reconcile that logs nothing formats nothing."""
    if isinstance(value, datetime):
        instant = value.astimezone(UTC).isoformat(timespec="milliseconds")
        return instant.replace(".000+00:00", "Z").replace("+00:00", "Z")
    return str(value)


def install(handler: logging.Handler) -> None:
    """JSON lines with the fields on `handler`."""
    handler.setFormatter(JsonFormatter())
