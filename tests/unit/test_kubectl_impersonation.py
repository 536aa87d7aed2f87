"""--as, --as-group and --as-uid through the real client (the official `kubernetes` package, in
the plugin's own environment) against a stand-in API server that records the headers it gets:
one Impersonate-Group line per group, as the API server reads them. And the completion of
ScheduledJob names through that client, with the same flags. Skipped without `make plugin`."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
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


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Recorder, Path]]:
    recorder = Recorder()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": f"http://127.0.0.1:{recorder.server_port}"}}
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "k", "context": {"cluster": "c", "user": "u", "namespace": "team"}}],
        "current-context": "k",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    threading.Thread(target=recorder.serve_forever, daemon=True).start()
    try:
        yield recorder, kubeconfig
    finally:
        recorder.shutdown()
        recorder.server_close()


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
    result = subprocess.run(
        [str(PLUGIN_BIN / "python"), "-c", complete, *words],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.stdout, result.stderr) == ("nightly\nnoon\n:4\n", "")
    assert recorder.seen == [
        {"Impersonate-User": ["jane"], "Impersonate-Group": [], "Impersonate-Uid": []}
    ]
