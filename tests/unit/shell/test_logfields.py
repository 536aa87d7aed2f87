"""JSON logs with controller-runtime's field names and the object a record is about: a real
reconcile (the scheduler's keyed loop, the applier, the writer, on the fake API server) logs a
line that names its controller, namespace, name, reconcile, run and slot, without any log call
passing them; kopf's per-object records get the same fields from their object reference."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from builders import NAMESPACE
from fakeapi import FakeApiServer
from harness import Shell, eventually

from cronlease.app.options import configure_logging
from cronlease.core.names.naming import format_time, scheduled_job_name
from cronlease.shell import logfields
from cronlease.shell.writer import FENCING_MESSAGE

JOB_PATH = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"


@contextlib.contextmanager
def logging_as(log_format: str) -> Iterator[None]:
    """The operator's logging, then the test run's again. Entered in a test's body: kopf's
    handler writes to the sys.stderr of when it was made, which capsys swaps per test phase."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging(log_format, verbose=False)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def records(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def now() -> datetime:
    return datetime.now(UTC)


async def test_a_reconcile_s_log_line_names_its_object_run_and_slot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shell = Shell(FakeApiServer(clock=now), clock=now)
    # The fence refuses this operator's identity: the writer logs it, in the middle of a create.
    refusal = f'{FENCING_MESSAGE} only system:serviceaccount:x:y writes; "alice" may not'
    shell.server.fail("POST", JOB_PATH, 403, refusal, skip=1, times=1000)
    due = now().replace(microsecond=0)
    shell.create("once", schedule=None, runAt=format_time(due))
    seen: list[dict[str, Any]] = []

    def logged() -> bool:
        seen.extend(records(capsys.readouterr().err))
        return any(r["msg"].startswith("the fencing policy refuses") for r in seen)

    with logging_as("json"):
        task = asyncio.create_task(shell.scheduler.run())
        try:
            await eventually(logged, deadline=10)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await shell.scheduler.drain()
    line = next(r for r in seen if r["msg"].startswith("the fencing policy refuses"))
    assert list(line)[:4] == ["ts", "level", "logger", "msg"]
    assert (line["level"], line["logger"]) == ("error", "cronlease.shell.writer")
    assert line["ts"].endswith("Z")  # RFC 3339 in UTC, as controller-runtime's
    assert abs(datetime.fromisoformat(line["ts"]) - now()).total_seconds() < 60
    assert (line["controller"], line["namespace"], line["name"]) == ("scheduler", NAMESPACE, "once")
    assert uuid.UUID(line["reconcileID"])
    job = scheduled_job_name("once", due, with_seconds=True)  # a runAt's Job is named to the s
    assert (line["run"], line["slot"]) == (job, format_time(due).replace(".000Z", "Z"))
    # The loop's own line about the same reconcile: the same object and reconcile, no run.
    retrying = next(r for r in seen if "retrying in" in r["msg"])
    assert retrying["reconcileID"] == line["reconcileID"]
    assert (retrying["namespace"], retrying["name"]) == (NAMESPACE, "once")
    assert "run" not in retrying
    assert "severity" not in line  # kopf's names are not ours any more


def test_fields_kopf_objects_extras_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("cronlease.test")
    ref = {"apiVersion": "v1", "kind": "Pod", "namespace": "kube-system", "name": "p", "uid": "u"}
    with logging_as("json"):
        log.info("outside any reconcile")
        with logfields.bound(namespace="team", name="nightly"):
            with logfields.bound(run="nightly-1", slot=datetime(2026, 12, 1, 9, tzinfo=UTC)):
                log.warning("inside, %s", "nested")
            log.debug("not at INFO")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("failed")
        logging.getLogger("kopf.objects").error("handler failed", extra={"k8s_ref": ref})
        log.info("with an extra", extra={"attempt": 2})
    outside, nested, failed, kopf_line, extra = records(capsys.readouterr().err)
    assert "namespace" not in outside
    assert outside["level"] == "info"
    assert nested["msg"] == "inside, nested"
    assert nested["level"] == "warn"
    assert (nested["namespace"], nested["name"], nested["run"]) == ("team", "nightly", "nightly-1")
    assert nested["slot"] == "2026-12-01T09:00:00Z"
    assert "run" not in failed  # the inner binding ended with its block
    assert failed["error"] == "ValueError: boom"
    assert failed["stacktrace"].startswith("Traceback")
    assert (kopf_line["namespace"], kopf_line["name"]) == ("kube-system", "p")
    assert kopf_line["object"]["kind"] == "Pod"
    assert extra["attempt"] == 2


def test_text_logs_keep_their_lines(capsys: pytest.CaptureFixture[str]) -> None:
    with logging_as("text"), logfields.bound(namespace="team", name="nightly"):
        logging.getLogger("cronlease.test").warning("plain")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line]
    assert line.endswith("cronlease.test: plain")
