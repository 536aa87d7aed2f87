"""The plugin through its real client (`cronlease.kubectl.client`, the official `kubernetes`
package) against a stand-in API server whose clock is hours off the host's: `adopt --dry-run`
counts the CronJob's missed slots on the server's clock, read from the `Date` of its answers.

The client lives only in the plugin's own environment (`make plugin` builds .venv-plugin), so the
plugin runs there, as users run it; without that environment these tests skip."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / ".venv-plugin" / "bin" / "kubectl-cronlease"
CRONJOB_PATH = "/apis/batch/v1/namespaces/team/cronjobs/hourly"

pytestmark = pytest.mark.skipif(
    not PLUGIN.exists(), reason=f"the plugin is not installed at {PLUGIN}: run `make plugin`"
)


class StandIn(HTTPServer):
    """Answers GET of one CronJob; every answer's Date is `skew` off the host's clock."""

    def __init__(self, skew: timedelta, cronjob: dict[str, Any]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.skew, self.cronjob = skew, cronjob


class _Handler(BaseHTTPRequestHandler):
    server: StandIn

    def date_time_string(self, timestamp: float | None = None) -> str:
        return format_datetime(datetime.now(UTC) + self.server.skew, usegmt=True)

    def do_GET(self) -> None:
        found = self.path.split("?")[0] == CRONJOB_PATH
        body = json.dumps(self.server.cronjob if found else {"kind": "Status", "code": 404})
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


def hourly(last: datetime) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": "hourly",
            "namespace": "team",
            "uid": "cj-uid",
            "creationTimestamp": "2020-01-01T00:00:00Z",
        },
        "spec": {
            "schedule": "0 * * * *",
            "timeZone": "UTC",
            "jobTemplate": {"spec": {"template": {}}},
        },
        "status": {"lastScheduleTime": last.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


@contextlib.contextmanager
def serving(server: StandIn, kubeconfig: Path) -> Iterator[None]:
    """The stand-in answering in a thread, and a kubeconfig that points at it."""
    cluster = {"server": f"http://127.0.0.1:{server.server_port}"}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "k", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "k",
    }
    kubeconfig.write_text(json.dumps(config))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("hours", [-6, 6], ids=["host-ahead", "host-behind"])
def test_a_dry_run_counts_missed_slots_on_the_api_server_s_clock(
    hours: int, tmp_path: Path
) -> None:
    """The CronJob ran the hour before the server's current one: by the server's clock it
    missed one slot (the current hour's), whatever the host's clock says. The server's clock
    reads half past, far from an hour's turn."""
    host = datetime.now(UTC)
    current = (host + timedelta(hours=hours)).replace(minute=0, second=0, microsecond=0)
    server = StandIn(current + timedelta(minutes=30) - host, hourly(current - timedelta(hours=1)))
    kubeconfig = tmp_path / "kubeconfig"
    args = ["adopt", "cronjob/hourly", "-n", "team", "--dry-run", "-o", "json"]
    with serving(server, kubeconfig):
        result = subprocess.run(
            [str(PLUGIN), *args, "--kubeconfig", str(kubeconfig)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    (missed,) = [d for d in json.loads(result.stdout)["differences"] if d.startswith("missed")]
    assert missed.startswith("missed slots: 1 since"), missed
    assert f"the latest {current.strftime('%Y-%m-%dT%H:%M:%SZ')}" in missed
