"""An HTTP proxy in front of the real API server that fails or delays chosen requests, for fault
tests.

    python -m devcluster.faultproxy --kubeconfig ADMIN --listen 127.0.0.1:PORT --rules RULES.json

Clients talk plain HTTP to the proxy with their own bearer token; the proxy forwards over TLS to
the server in ADMIN's kubeconfig. A rule matches a method, a path pattern and a query pattern, and
acts on every `every`-th matching request:
  reject  answer `status` without forwarding (the write never happened);
  lose    forward, then answer 500 (the write happened, its response is lost);
  delay   hold the request `seconds`, then forward it: the server (and its admission) sees it
          only then, as if the client had been paused between deciding and sending.
Watches and other responses stream through untouched. GET /__faults returns each rule's counters:
how many requests it saw and acted on, how many it holds now, and the server's answers (status
code: count) to the requests it forwarded. A rule can start switched off (`enabled: false`) and be
switched at run time: POST /__faults/INDEX with {"enabled": true|false} (a fault that comes and
goes, as in bench/chaos.py); a rule that is off lets every request through and counts nothing.
`FaultProxy` runs the proxy as a process for tests.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from aiohttp import ClientSession, TCPConnector, web

from devcluster.processes import free_port

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


Action = Literal["reject", "lose", "delay"]


@dataclass
class Rule:
    method: str
    path: str  # a regular expression, searched in the request path
    action: Action
    every: int = 1
    status: int = 500  # reject: the status answered
    seconds: float = 0.0  # delay: how long a request is held before it is forwarded
    query: str = ""  # a regular expression, searched in the query string ("" matches all)
    enabled: bool = True  # off: the rule matches nothing (switched by POST /__faults/INDEX)
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)
    held: int = field(default=0, init=False)
    answers: dict[str, int] = field(default_factory=dict, init=False)
    _path: re.Pattern[str] = field(init=False, repr=False)
    _query: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.action not in get_args(Action):
            raise ValueError(f"unknown action {self.action!r}")
        if self.action == "delay" and self.seconds <= 0:
            raise ValueError("a delay rule needs seconds > 0")
        self._path, self._query = re.compile(self.path), re.compile(self.query)

    def spec(self) -> dict[str, Any]:
        """The rule as the proxy's --rules file holds it (no counters)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.init}

    def report(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "action": self.action,
                "enabled": self.enabled, "seen": self.seen, "fired": self.fired, "held": self.held,
                "answers": self.answers}  # fmt: skip

    def fires(self, method: str, path: str, query: str) -> bool:
        if not self.enabled or method != self.method:
            return False
        if not self._path.search(path) or not self._query.search(query):
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        self.fired += 1
        return True


def _upstream(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
    return cluster["cluster"]["server"], ssl.create_default_context(cadata=ca)


def make_app(upstream: str, tls: ssl.SSLContext, rules: list[Rule]) -> web.Application:
    session: dict[str, ClientSession] = {}

    async def faults(_: web.Request) -> web.Response:
        return web.json_response([rule.report() for rule in rules])

    async def switch(request: web.Request) -> web.Response:
        index = int(request.match_info["index"])
        if not 0 <= index < len(rules):
            return _status(404, f"no rule {index}")
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("enabled"), bool):
            return _status(400, 'expected {"enabled": true|false}')
        rules[index].enabled = body["enabled"]
        return web.json_response(rules[index].report())

    async def proxy(request: web.Request) -> web.StreamResponse:
        if "client" not in session:
            # Bodies pass through as the server encoded them (a large LIST comes gzipped), with
            # their Content-Encoding, for the client to decode as it asked to.
            session["client"] = ClientSession(
                connector=TCPConnector(ssl=tls, limit=200), auto_decompress=False
            )
        body = await request.read()
        rule = next(
            (r for r in rules if r.fires(request.method, request.path, request.query_string)), None
        )
        if rule is not None and rule.action == "reject":
            return _status(rule.status, "injected fault: rejected before reaching the server")
        if rule is not None and rule.action == "delay":
            rule.held += 1
            try:
                await asyncio.sleep(rule.seconds)
            finally:
                rule.held -= 1
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with session["client"].request(
            request.method,
            upstream + request.path_qs,
            headers=headers,
            data=body or None,
            timeout=None,
            skip_auto_headers=("Accept-Encoding",),  # only what the client accepts
        ) as upstream_response:
            if rule is not None:
                answer = str(upstream_response.status)
                rule.answers[answer] = rule.answers.get(answer, 0) + 1
            if rule is not None and rule.action == "lose":  # the server did it; nobody hears
                await upstream_response.read()
                return _status(500, "injected fault: the response was lost")
            response = web.StreamResponse(status=upstream_response.status)
            for key, value in upstream_response.headers.items():
                if key.lower() not in HOP_HEADERS:
                    response.headers[key] = value
            await response.prepare(request)
            try:
                async for chunk in upstream_response.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:
                pass  # the client went away (it closed a watch): nobody to answer
            return response

    async def close(_: web.Application) -> None:
        if "client" in session:
            await session["client"].close()

    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.on_cleanup.append(close)
    app.router.add_get("/__faults", faults)
    app.router.add_post(r"/__faults/{index:\d+}", switch)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def _status(code: int, message: str) -> web.Response:
    reason = {
        400: "BadRequest",
        404: "NotFound",
        409: "Conflict",
        429: "TooManyRequests",
        500: "InternalError",
    }.get(code, "Unknown")
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    headers = {"Retry-After": "1"} if code == 429 else {}
    return web.json_response(body, status=code, headers=headers)


@dataclass
class FaultProxy:
    """A running proxy: `kubeconfig` is the client's, pointed at it; `faults()` its counters."""

    url: str
    kubeconfig: Path

    def faults(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/__faults", timeout=5) as response:
            result: list[dict[str, Any]] = json.load(response)
            return result

    def switch(self, index: int, enabled: bool) -> dict[str, Any]:
        """Turn rule `index` on or off; returns its counters."""
        request = urllib.request.Request(
            f"{self.url}/__faults/{index}",
            data=json.dumps({"enabled": enabled}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            result: dict[str, Any] = json.load(response)
            return result


@contextmanager
def running(
    upstream: Path, client: Path, rules: Sequence[Rule], work_dir: Path, timeout: float = 15
) -> Iterator[FaultProxy]:
    """The proxy as a process in front of the server in `upstream` (a kubeconfig), for as long as
    the block runs; clients use a copy of the `client` kubeconfig (its own credentials) that
    points at the proxy. Its rules, log and that kubeconfig are written to `work_dir`."""
    rules_file = work_dir / "faultproxy-rules.json"
    rules_file.write_text(json.dumps([rule.spec() for rule in rules]))
    port = free_port()
    proxy = FaultProxy(f"http://127.0.0.1:{port}", work_dir / "faultproxy-kubeconfig")
    config = yaml.safe_load(client.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"] = {"server": proxy.url}
    proxy.kubeconfig.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "devcluster.faultproxy", "--rules", str(rules_file)]
    command += ["--kubeconfig", str(upstream), "--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    with (work_dir / "faultproxy.log").open("ab") as log:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        _wait_answering(proxy, process, timeout)
        yield proxy
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_answering(proxy: FaultProxy, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the fault proxy exited at start (code {process.returncode})")
        try:
            proxy.faults()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the fault proxy did not answer within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--listen", required=True, help="host:port")
    parser.add_argument("--rules", required=True, type=Path, help="a JSON list of rules")
    args = parser.parse_args()
    upstream, tls = _upstream(args.kubeconfig)
    rules = [Rule(**raw) for raw in json.loads(args.rules.read_text())]
    host, port = args.listen.rsplit(":", 1)
    web.run_app(
        make_app(upstream, tls, rules), host=host, port=int(port), print=None, shutdown_timeout=1
    )


if __name__ == "__main__":
    main()
