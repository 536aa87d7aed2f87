"""The plugin's kubectl conventions through its command line (cli.main, argument parsing
included) on a fake API: --version, -o wide|name where it lists objects, --as/--as-group/--as-uid
handed to the client, the usage errors' hint, and the exit codes: 3 for a finding, 1 for an
error, 2 for a usage error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from test_kubectl_plugin import job, minute_job, scheduled_job

from cronlease.kubectl import cli
from cronlease.kubectl.errors import EXIT_ERROR, EXIT_FINDING, EXIT_USAGE, PluginError
from cronlease.kubectl.impersonation import Impersonation

WINDOW = ["--from", "2026-12-01T11:51:00Z", "--to", "2026-12-01T11:53:30Z"]


class FakeApi:
    """What history, dead-letters, audit, suspend and run-now read, in namespace "ns"."""

    default_namespace = "ns"

    def __init__(self, jobs: list[dict[str, Any]], **status: Any) -> None:
        self.sj = scheduled_job(processedUntil="2026-12-01T11:56:00Z", **status)
        self.job_list = jobs
        self.patches: list[dict[str, Any]] = []

    def scheduled_job(self, namespace: str, name: str) -> dict[str, Any]:
        if name != "sj":
            raise PluginError(f"scheduledjob {name!r} in namespace {namespace!r} not found")
        return self.sj

    def scheduled_jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        return [self.sj]

    def jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        wanted = [s.split("=") for s in selector.split(",") if "=" in s]
        return [
            j for j in self.job_list if all(j["metadata"]["labels"].get(k) == v for k, v in wanted)
        ]

    def events(self, namespace: str | None, field_selector: str = "") -> list[dict[str, Any]]:
        return []

    def patch_scheduled_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patches.append(patch)


@dataclass
class Connected:
    api: FakeApi
    calls: list[tuple[Any, ...]] = field(default_factory=list)  # cli.connect's arguments


@pytest.fixture
def connected(monkeypatch: pytest.MonkeyPatch) -> Connected:
    """The fake in place of the client: the runs of three slots, all on record."""
    connected = Connected(FakeApi([minute_job(51), minute_job(52), minute_job(53)]))

    def connect(*args: Any) -> FakeApi:
        connected.calls.append(args)
        return connected.api

    monkeypatch.setattr(cli, "connect", connect)
    return connected


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    code = exit_info.value.code
    assert isinstance(code, int)
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out == f"kubectl-cronlease {cli.version()}\n"
    assert cli.version()[0].isdigit()  # the tests run from an installed distribution


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    codes = out.split("exit codes:")[1]
    assert [line.split()[0] for line in codes.splitlines() if line[:3].strip().isdigit()] == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert "3  a finding: audit found a slot missing or doubled" in codes


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["frobnicate"], "(see kubectl cronlease --help)"),
        ([], "(see kubectl cronlease --help)"),
        (["history"], "(see kubectl cronlease history --help)"),
        (["next", "-o", "wide", "--schedule", "* * * * *"], "(see kubectl cronlease next --help)"),
    ],
)
def test_usage_errors_name_the_command_once(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(argv, capsys)
    assert code == EXIT_USAGE
    assert err.rstrip().endswith(hint), err
    assert "cronlease cronlease" not in err


@pytest.mark.parametrize("command", ["next", "leader", "backfill", "replay", "adopt"])
@pytest.mark.parametrize("output", ["wide", "name"])
def test_wide_and_name_only_where_the_command_lists(
    command: str, output: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run([command, "-o", output], capsys)
    assert code == EXIT_USAGE
    assert f"argument -o/--output: invalid choice: '{output}'" in err


def test_history_wide_and_name(connected: Connected, capsys: pytest.CaptureFixture[str]) -> None:
    failed = {
        "startTime": "2026-12-01T11:54:01Z",
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "lastTransitionTime": "2026-12-01T11:54:09Z",
            }
        ],
    }
    connected.api.job_list.append(job("sj-29935434", "2026-12-01T11:54:00Z", status=failed))
    _, plain, _ = run(["history", "sj"], capsys)
    code, wide, _ = run(["history", "sj", "-o", "wide"], capsys)
    assert code == 0
    headers = ["RUN", "SLOT", "TRIGGER", "ATTEMPTS", "RESULT", "LAG", "FINISHED", "JOB"]
    assert plain.splitlines()[0].split() == headers
    assert wide.splitlines()[0].split()[-3:] == ["STARTED", "REASON", "KIND"]
    assert wide.splitlines()[-1].split()[-3:] == ["2026-12-01T11:54:01Z", "DeadlineExceeded", "Job"]
    assert "STARTED" not in plain
    code, names, _ = run(["history", "sj", "-o", "name"], capsys)
    assert code == 0
    assert names.splitlines() == [
        "job.batch/sj-29935431",
        "job.batch/sj-29935432",
        "job.batch/sj-29935433",
        "job.batch/sj-29935434",
    ]


def test_dead_letters_wide_and_name(
    connected: Connected, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = {
        "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    }
    letter = job(
        "sj-29935435",
        "2026-12-01T11:55:00Z",
        status=failed,
        labels={"cronlease.io/dead-letter": "true"},
    )
    connected.api.job_list.append(letter)
    code, names, _ = run(["dead-letters", "-o", "name"], capsys)
    assert (code, names) == (0, "job.batch/sj-29935435\n")
    _, plain, _ = run(["dead-letters"], capsys)
    _, wide, _ = run(["dead-letters", "-o", "wide"], capsys)
    assert plain.split()[0] == "SCHEDULEDJOB"
    assert wide.split()[0] == "NAMESPACE"
    assert wide.splitlines()[1].split()[0] == "ns"
    assert wide.splitlines()[0].split()[-1] == "KIND"


def test_audit_exits_3_on_a_finding_and_names_what_it_found(
    connected: Connected, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["audit", "sj", *WINDOW], capsys)
    assert code == 0, out
    code, names, _ = run(["audit", "-A", *WINDOW, "-o", "name"], capsys)
    assert (code, names) == (0, "")
    connected.api.job_list.remove(minute_job(52))
    code, out, _ = run(["audit", "sj", *WINDOW], capsys)
    assert code == EXIT_FINDING
    assert "1 missing" in out.splitlines()[-1]
    code, names, _ = run(["audit", "-A", *WINDOW, "-o", "name"], capsys)
    assert (code, names) == (EXIT_FINDING, "scheduledjob.cronlease.io/sj\n")
    code, wide, _ = run(["audit", "sj", *WINDOW, "-o", "wide"], capsys)
    assert code == EXIT_FINDING
    assert wide.splitlines()[1].split() == ["SLOT", "VERDICT", "DETAIL", "JOBS"]
    assert wide.splitlines()[2].rstrip().endswith("sj-29935431")
    code, wide, _ = run(["audit", "-A", *WINDOW, "-o", "wide"], capsys)
    assert wide.splitlines()[1].split()[3:] == [
        "RAN",
        "SKIPPED",
        "MISSING",
        "DOUBLED",
        "NO-RECORD",
        "BEFORE-START",
        "WAITING",
        "DUE",
        "FUTURE",
        "AUDIT",
    ]


@pytest.mark.usefixtures("connected")
def test_an_error_is_exit_1_not_a_finding(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["audit", "nosuch", *WINDOW], capsys)
    assert code == EXIT_ERROR
    assert err == "error: scheduledjob 'nosuch' in namespace 'ns' not found\n"


def test_suspend_name(connected: Connected, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["suspend", "sj", "-o", "name"], capsys)
    assert (code, out) == (0, "scheduledjob.cronlease.io/sj\n")
    assert connected.api.patches == [{"spec": {"suspend": True}}]


def test_impersonation_reaches_the_client(
    connected: Connected, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["history", "sj", "--as", "jane", "--as-group", "ops", "--as-group", "dev"]
    code, _, _ = run([*argv, "--as-uid", "u-1", "--context", "prod"], capsys)
    assert code == 0
    assert connected.calls == [(None, "prod", Impersonation("jane", ("ops", "dev"), "u-1"))]
    connected.calls.clear()
    run(["history", "sj"], capsys)
    assert connected.calls == [(None, None, None)]


@pytest.mark.parametrize(
    "argv", [["--as-group", "ops"], ["--as-uid", "u-1"], ["--as", "jane", "--as-group", ""]]
)
@pytest.mark.usefixtures("connected")
def test_impersonation_flags_kubectl_refuses(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["history", "sj", *argv], capsys)
    assert code == EXIT_USAGE
    assert err.startswith("error: --as")


def test_the_missing_client_names_its_package(capsys: pytest.CaptureFixture[str]) -> None:
    # The operator's environment (these tests') holds no `kubernetes` client, by design.
    code, _, err = run(["history", "sj"], capsys)
    assert code == EXIT_ERROR
    assert "the Python package `kubernetes`" in err
    assert f"pipx install kubectl_cronlease-{cli.version()}-py3-none-any.whl" in err
    assert "cronlease[plugin]" not in err
