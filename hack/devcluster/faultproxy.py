"""An HTTP proxy in front of the real API server that fails chosen requests, for fault tests.

    python -m devcluster.faultproxy --kubeconfig ADMIN --listen 127.0.0.1:PORT --rules RULES.json

Clients talk plain HTTP to the proxy with their own bearer token; the proxy forwards over TLS to
the server in ADMIN's kubeconfig. A rule matches a method and a path pattern, and acts on every
`every`-th matching request:
  reject  answer `status` without forwarding (the write never happened);
  lose    forward, then answer 500 (the write happened, its response is lost).
Watches and other responses stream through untouched. GET /__faults returns the counters.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiohttp import ClientSession, TCPConnector, web

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


@dataclass
class Rule:
    method: str
    path: str  # a regular expression, searched in the request path
    action: str  # "reject" or "lose"
    every: int
    status: int = 500
    seen: int = 0
    fired: int = 0
    _pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(self.path)

    def report(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "action": self.action,
                "seen": self.seen, "fired": self.fired}  # fmt: skip

    def fires(self, method: str, path: str) -> bool:
        if method != self.method or not self._pattern.search(path):
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

    async def proxy(request: web.Request) -> web.StreamResponse:
        if "client" not in session:
            session["client"] = ClientSession(connector=TCPConnector(ssl=tls, limit=200))
        body = await request.read()
        rule = next((r for r in rules if r.fires(request.method, request.path)), None)
        if rule is not None and rule.action == "reject":
            return _status(rule.status, "injected fault: rejected before reaching the server")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with session["client"].request(
            request.method,
            upstream + request.path_qs,
            headers=headers,
            data=body or None,
            timeout=None,
        ) as upstream_response:
            if rule is not None:  # "lose": the server did it; the client never hears
                await upstream_response.read()
                return _status(500, "injected fault: the response was lost")
            response = web.StreamResponse(status=upstream_response.status)
            for key, value in upstream_response.headers.items():
                if key.lower() not in HOP_HEADERS:
                    response.headers[key] = value
            await response.prepare(request)
            async for chunk in upstream_response.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=32 * 1024 * 1024)
    app.router.add_get("/__faults", faults)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def _status(code: int, message: str) -> web.Response:
    reason = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError"}.get(code, "Unknown")
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
