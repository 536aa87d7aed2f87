"""The command line: cronlease's flags, controller-runtime's names for them, and JSON logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from cronlease.app.options import configure_logging, parse_args
from cronlease.core.names.distribution import version


@pytest.mark.parametrize(
    ("argv", "field", "expected"),
    [
        ([], "leader_election", True),
        (["--no-leader-election"], "leader_election", False),
        (["--leader-elect"], "leader_election", True),
        (["--leader-elect=false"], "leader_election", False),
        (["--leader-elect=False"], "leader_election", False),
        (["--leader-elect", "true"], "leader_election", True),
        (["--leader-elect=0"], "leader_election", False),
        ([], "metrics_bind", "0.0.0.0:8080"),
        (["--metrics-bind-address=:9090"], "metrics_bind", "0.0.0.0:9090"),
        (["--metrics-bind=127.0.0.1:9090"], "metrics_bind", "127.0.0.1:9090"),
        ([], "health_bind", "0.0.0.0:8081"),
        (["--health-probe-bind-address", "127.0.0.1:7"], "health_bind", "127.0.0.1:7"),
        (["--liveness-bind=127.0.0.1:8"], "health_bind", "127.0.0.1:8"),
        ([], "log_format", "text"),
        (["--log-format", "json"], "log_format", "json"),
    ],
)
def test_flags_and_their_controller_runtime_names(
    argv: list[str], field: str, expected: object
) -> None:
    assert getattr(parse_args(argv), field) == expected


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--leader-elect=maybe"], "--leader-elect"),
        (["--metrics-bind-address=8080"], "--metrics-bind"),
        (["--health-probe-bind-address=host:99999"], "--liveness-bind"),
        (["--log-format=xml"], "--log-format"),
    ],
)
def test_a_bad_flag_value_fails_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--version"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out.strip()
    assert printed == f"cronlease {version()}"
    assert version()[0].isdigit()  # the tests run from an installed (editable) distribution


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_json_logs_are_one_object_a_line_with_level_and_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # controller-runtime's names (cronlease.shell.logfields; tests/unit/shell/test_logfields.py has
    # the rest)
    configure_logging("json", verbose=False)
    logging.getLogger("cronlease.test").warning("slot %s skipped", "08:30")
    logging.getLogger("cronlease.test").debug("not at INFO")
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["msg"] == "slot 08:30 skipped"
    assert record["level"] == "warn"
    assert record["logger"] == "cronlease.test"
    assert record["ts"]


@pytest.mark.usefixtures("restore_logging")
def test_text_logs_are_not_json(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("text", verbose=False)
    logging.getLogger("cronlease.test").warning("plain")
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line]
    assert line.endswith("plain")
    assert not line.startswith("{")
