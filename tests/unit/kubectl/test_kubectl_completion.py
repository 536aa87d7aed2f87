"""kubectl_complete-cronlease: what kubectl's plugin completion reads (candidates a line, then
`:<directive>`) for commands, flags, their values and ScheduledJob names, from the plugin's own
parser; a cluster it cannot reach completes no name and prints no error."""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

import pytest

from cronlease.kubectl import __main__ as entry
from cronlease.kubectl import completion
from cronlease.kubectl.completion import DEFAULT, NO_FILE, complete
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.impersonation import Impersonation

COMMANDS = ["run-now", "next", "history", "suspend", "resume", "backfill", "replay"]
COMMANDS += ["dead-letters", "audit", "adopt", "leader"]


class Listing:
    default_namespace = "team"

    def __init__(self) -> None:
        self.listed: list[str] = []

    def scheduled_jobs(self, namespace: str) -> list[dict[str, Any]]:
        self.listed.append(namespace)
        return [{"metadata": {"name": n}} for n in ("nightly", "hourly", "noon")] + [{}]

    def cronjobs(self, namespace: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": "legacy"}}]


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> tuple[Listing, list[tuple[Any, ...]]]:
    api, calls = Listing(), []

    def connect(*args: Any) -> Listing:
        calls.append(args)
        return api

    monkeypatch.setattr(completion, "connect", connect)
    return api, calls


def test_the_commands_with_their_help() -> None:
    found, directive = complete([""])
    assert [c.split("\t")[0] for c in found] == COMMANDS
    assert "history\truns: trigger, attempts, result, lag" in found
    assert directive == NO_FILE
    assert complete(["dead"]) == (["dead-letters\truns whose attempts all failed"], NO_FILE)
    assert complete(["-"]) == (["--help", "--version"], NO_FILE)
    assert complete([]) == complete([""])


def test_flags_and_their_values() -> None:
    flags, _ = complete(["audit", "--"])
    assert {"--namespace", "--output", "--from", "--to", "--as", "--as-group"} <= set(flags)
    assert complete(["history", "--ou"]) == (["--output"], NO_FILE)
    assert complete(["history", "-o", ""]) == (["json", "yaml", "wide", "name"], NO_FILE)
    assert complete(["next", "--output", ""]) == (["json", "yaml"], NO_FILE)
    assert complete(["history", "--output=w"]) == (["--output=wide"], NO_FILE)
    assert complete(["backfill", "x", "--policy", "F"]) == (["Forbid"], NO_FILE)
    assert complete(["audit", "--from", ""]) == ([], NO_FILE)  # a time: nothing to offer
    assert complete(["audit", "--kubeconfig", ""]) == ([], DEFAULT)  # a file: the shell's
    assert complete(["frobnicate", ""]) == ([], NO_FILE)


def test_scheduled_job_names_from_the_typed_context(
    cluster: tuple[Listing, list[tuple[Any, ...]]],
) -> None:
    api, calls = cluster
    words = ["history", "-n", "prod", "--context", "c1", "--as", "jane", "--as-group=ops", "n"]
    assert complete(words) == (["nightly", "noon"], NO_FILE)
    assert api.listed == ["prod"]
    assert calls == [(None, "c1", Impersonation("jane", ("ops",)), completion.TIMEOUT_SECONDS)]
    assert complete(["history", "nightly", ""]) == ([], NO_FILE)  # one name only
    assert complete(["replay", "--dead-letters", "h"]) == (["hourly"], NO_FILE)
    assert complete(["adopt", ""]) == (["cronjob/legacy"], NO_FILE)
    complete(["run-now", ""])
    assert api.listed[-1] == "team"  # the context's namespace
    # Every command whose positional is a ScheduledJob's `name` completes it; replay's are Jobs.
    named = ["run-now", "next", "history", "suspend", "resume", "backfill", "dead-letters"]
    for command in [*named, "audit"]:
        assert complete([command, "noo"]) == (["noon"], NO_FILE), command
    assert complete(["replay", ""]) == ([], NO_FILE)
    assert complete(["leader", ""]) == ([], NO_FILE)
    before = len(api.listed)
    assert complete(["history", "-n", "no/such", ""]) == ([], NO_FILE)  # -n as commands check it
    assert len(api.listed) == before


def test_an_unreachable_cluster_completes_nothing_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(*args: Any) -> Any:
        raise PluginError("cannot reach the API server")

    monkeypatch.setattr(completion, "connect", refuse)
    assert complete(["history", ""]) == ([], NO_FILE)
    monkeypatch.setattr(completion, "complete", lambda words: 1 / 0)  # a bug, even
    completion.main(["history", ""])
    out, err = capsys.readouterr()
    assert (out, err) == (":4\n", "")


def test_the_protocol_lines() -> None:
    out = io.StringIO()
    completion.write(["a\tfirst", "b"], NO_FILE, out)
    assert out.getvalue() == "a\tfirst\nb\n:4\n"


@pytest.mark.parametrize(
    ("program", "first"),
    [("/opt/krew/bin/kubectl_complete-cronlease", "audit\t"), ("kubectl-cronlease", "usage:")],
)
def test_the_krew_executable_completes_under_the_completer_s_name(
    program: str, first: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # krew links one file onto the PATH; a link to it named kubectl_complete-cronlease completes.
    monkeypatch.setattr(sys, "argv", [program, "aud" if "complete" in program else "--help"])
    with contextlib.suppress(SystemExit):
        entry.main()
    assert capsys.readouterr().out.startswith(first)
