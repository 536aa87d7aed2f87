"""The fault proxy's rules switched on and off at run time (bench/chaos.py's lease-latency fault),
in front of a plain-HTTP upstream on the loopback."""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from devcluster.faultproxy import Rule, make_app

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/cronlease-system/leases/cronlease-leader"


BIG = [{"name": f"job-{i}", "padding": "x" * 100} for i in range(2000)]


async def _upstream_answer(request: web.Request) -> web.Response:
    if request.path == "/big":  # a large LIST: the API server gzips it if the client accepts it
        response = web.json_response({"items": BIG})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression(web.ContentCoding.gzip)
        return response
    return web.json_response({"path": request.path})


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[str, list[Rule]]]:
    upstream_app = web.Application()
    upstream_app.router.add_route("*", "/{tail:.*}", _upstream_answer)
    upstream = TestServer(upstream_app, host="127.0.0.1")
    await upstream.start_server()
    rules = [Rule("GET", r"/leases/", "delay", seconds=0.5, enabled=False)]
    proxy = TestServer(
        make_app(str(upstream.make_url("")), ssl.create_default_context(), rules), host="127.0.0.1"
    )
    await proxy.start_server()
    yield str(proxy.make_url("")), rules
    await proxy.close()
    await upstream.close()


async def _timed_get(session: ClientSession, url: str) -> float:
    start = time.monotonic()
    async with session.get(url) as response:
        assert response.status == 200
        assert (await response.json())["path"] == LEASE_PATH
    return time.monotonic() - start


async def test_a_rule_switched_on_and_off_at_run_time(proxied: tuple[str, list[Rule]]) -> None:
    url, rules = proxied
    async with ClientSession() as session:
        assert await _timed_get(session, url + LEASE_PATH) < 0.4  # off: through at once
        assert rules[0].seen == 0  # and not counted

        async with session.post(f"{url}/__faults/0", json={"enabled": True}) as response:
            assert response.status == 200
            assert (await response.json())["enabled"] is True
        assert await _timed_get(session, url + LEASE_PATH) >= 0.5  # on: held
        assert (rules[0].seen, rules[0].fired) == (1, 1)

        async with session.post(f"{url}/__faults/0", json={"enabled": False}) as response:
            assert response.status == 200
        assert await _timed_get(session, url + LEASE_PATH) < 0.4
        async with session.get(f"{url}/__faults") as response:
            report = await response.json()
        assert report[0]["enabled"] is False
        assert report[0]["seen"] == 1

        async with session.post(f"{url}/__faults/7", json={"enabled": True}) as response:
            assert response.status == 404
        async with session.post(f"{url}/__faults/0", json={"enabled": "yes"}) as response:
            assert response.status == 400


async def test_a_compressed_body_reaches_the_client_as_the_server_encoded_it(
    proxied: tuple[str, list[Rule]],
) -> None:
    url, _ = proxied
    async with ClientSession() as session:  # accepts gzip, and decodes it
        async with session.get(url + "/big") as response:
            assert response.headers.get("Content-Encoding") == "gzip"
            assert (await response.json())["items"] == BIG
        plain = {"Accept-Encoding": "identity"}
        async with session.get(url + "/big", headers=plain) as response:
            assert "Content-Encoding" not in response.headers
            assert (await response.json())["items"] == BIG
