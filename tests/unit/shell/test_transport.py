"""The real HttpTransport against the fake API server served over HTTP on the loopback."""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import AsyncIterator

import kopf
import pytest
from aiohttp.test_utils import TestServer
from fakeapi import FakeApiServer

from cronlease.shell.kube import TLS_READ_BUFFER, HttpTransport, KubeApi


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeApiServer, str]]:
    fake = FakeApiServer()
    server = TestServer(fake.app(), host="127.0.0.1")
    await server.start_server()
    yield fake, str(server.make_url("/"))
    await server.close()


async def test_a_rotated_token_logs_in_again_once(served: tuple[FakeApiServer, str]) -> None:
    fake, url = served
    fake.tokens = {"new"}  # "old" has expired
    logins: list[str] = []

    def relogin() -> kopf.ConnectionInfo:
        logins.append("again")
        return kopf.ConnectionInfo(server=url, token="new")

    api = KubeApi(HttpTransport(kopf.ConnectionInfo(server=url, token="old"), relogin, 4))
    try:
        assert await api.get_lease("cronlease-system", "absent") is None  # 404, after a login
        assert await api.get_lease("cronlease-system", "absent") is None  # no second login
    finally:
        await api.close()
    assert logins == ["again"]


async def test_a_token_refused_after_logging_in_again_is_an_error(
    served: tuple[FakeApiServer, str],
) -> None:
    fake, url = served
    fake.tokens = set()
    info = kopf.ConnectionInfo(server=url, token="old")
    api = KubeApi(HttpTransport(info, lambda: info, 4))
    try:
        with pytest.raises(Exception, match="401"):
            await api.get_lease("cronlease-system", "absent")
    finally:
        await api.close()
    assert len(fake.calls) == 0  # both attempts refused at the door


async def test_every_response_date_reaches_the_server_clock(
    served: tuple[FakeApiServer, str],
) -> None:
    """The API server's clock comes from the Date header of every response, errors included."""
    _, url = served
    dates: list[str | None] = []
    info = kopf.ConnectionInfo(server=url, token="t")
    api = KubeApi(HttpTransport(info, lambda: info, 4, on_date=dates.append))
    try:
        assert await api.get_lease("cronlease-system", "absent") is None  # a 404
    finally:
        await api.close()
    assert len(dates) == 1
    assert dates[0] is not None
    assert dates[0].endswith(" GMT")


async def test_tls_connections_read_into_64_kib_not_256(served: tuple[FakeApiServer, str]) -> None:
    """asyncio's default read buffer, zero-filled for each TLS connection's life, was 24 MB of
    the operator's RSS at a burst's 64 connections (docs/design-notes.md, item 103)."""
    _, url = served
    info = kopf.ConnectionInfo(server=url, token="t")
    api = KubeApi(HttpTransport(info, lambda: info, 4))
    try:
        loop = asyncio.get_running_loop()
        context = ssl.create_default_context()
        protocol = sslproto.SSLProtocol(loop, asyncio.Protocol(), context, loop.create_future())
        assert len(protocol.get_buffer(-1)) == TLS_READ_BUFFER == 64 * 1024
    finally:
        await api.close()
