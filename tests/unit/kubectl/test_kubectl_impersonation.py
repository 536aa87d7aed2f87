"""--as, --as-group and --as-uid through the real client (the official `kubernetes` package, in
the plugin's own environment) against a stand-in API server that records the headers it gets:
one Impersonate-Group line per group, as the API server reads them. And the completion of
ScheduledJob names through that client, with the same flags; against a server that accepts and
never answers, within the completion's timeout. Skipped without `make plugin`."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGIN_BIN = REPO / ".venv-plugin" / "bin"
LIST_PATH = "/apis/cronlease.io/v1alpha1/namespaces/team/scheduledjobs"

pytestmark = pytest.mark.skipif(
    not (PLUGIN_BIN / "kubectl-cronlease").exists(),
    reason=f"the plugin is not installed in {PLUGIN_BIN}: run `make plugin`",
)


class Recorder(HTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict[str, list[str]]] = []


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        names = ("Impersonate-User", "Impersonate-Group", "Impersonate-Uid")
        self.server.seen.append({n: self.headers.get_all(n) or [] for n in names})
        found = self.path.split("?")[0] == LIST_PATH
        items = [{"metadata": {"name": n}} for n in ("nightly", "noon", "hourly")]
        body = json.dumps({"items": items} if found else {"kind": "Status", "code": 404})
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:
        pass


def kubeconfig_for(port: int, path: Path) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "k", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
        "current-context": "k",
    }
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Recorder, Path]]:
    recorder = Recorder()
    kubeconfig = kubeconfig_for(recorder.server_port, tmp_path / "kubeconfig")
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        yield recorder, kubeconfig
    finally:
        recorder.shutdown()
        recorder.server_close()


def plugin_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`code` run by the plugin's own interpreter with `args`, bounded: a hang fails the test."""
    return subprocess.run(
        [str(PLUGIN_BIN / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_request_carries_the_impersonation_headers(server: tuple[Recorder, Path]) -> None:
    recorder, kubeconfig = server
    flags = ["--as", "jane", "--as-group", "ops", "--as-group", "dev", "--as-uid", "u-1"]
    result = subprocess.run(
        [
            str(PLUGIN_BIN / "kubectl-cronlease"),
            "history",
            "nightly",
            "--kubeconfig",
            str(kubeconfig),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1  # the stand-in knows no such object
    assert "scheduledjob 'nightly' in namespace 'team' not found" in result.stderr
    assert recorder.seen == [
        {
            "Impersonate-User": ["jane"],
            "Impersonate-Group": ["ops", "dev"],
            "Impersonate-Uid": ["u-1"],
        }
    ]


def test_names_complete_through_the_client(server: tuple[Recorder, Path]) -> None:
    recorder, kubeconfig = server
    complete = "from cronlease.kubectl.completion import main; main()"
    words = ["history", "--kubeconfig", str(kubeconfig), "--as", "jane", "n"]
    result = plugin_python(complete, *words)
    assert (result.stdout, result.stderr) == ("nightly\nnoon\n:4\n", "")
    assert recorder.seen == [
        {"Impersonate-User": ["jane"], "Impersonate-Group": [], "Impersonate-Uid": []}
    ]


@pytest.fixture
def silent(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig whose API server accepts connections and never answers: the kernel completes
    each handshake into the listening socket's backlog, and nothing ever reads or writes."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield kubeconfig_for(listener.getsockname()[1], tmp_path / "kubeconfig")


# The client's requests carry no timeout of their own (`timeout=None`): the plugin's applies.
# Short here; the bound on each subprocess is what fails the test if it is not applied.
SHORT = 0.5


def test_the_client_times_out_on_a_server_that_never_answers(silent: Path) -> None:
    probe = (
        "import sys\n"
        "from cronlease.kubectl.client import Api\n"
        "from cronlease.kubectl.errors import PluginError\n"
        "try:\n"
        f"    Api(sys.argv[1], None, timeout={SHORT}).scheduled_jobs('team')\n"
        "except PluginError as error:\n"
        "    print(error)\n"
    )
    result = plugin_python(probe, str(silent))
    assert result.stdout.startswith("cannot reach the API server"), result.stderr
    assert f"read timeout={SHORT}" in result.stdout


@pytest.mark.parametrize(
    "flags", [[], ["--as", "jane", "--as-group", "ops"]], ids=["plain", "impersonating"]
)
def test_a_server_that_never_answers_completes_nothing_within_the_timeout(
    silent: Path, flags: list[str]
) -> None:
    complete = (
        "from cronlease.kubectl import completion\n"
        f"completion.TIMEOUT_SECONDS = {SHORT}\n"
        "completion.main()\n"
    )
    words = ["history", "--kubeconfig", str(silent), *flags, "n"]
    result = plugin_python(complete, *words)
    assert (result.stdout, result.stderr) == (":4\n", "")
