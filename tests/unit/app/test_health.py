"""/healthz and /readyz: separate answers from separate checks."""

from __future__ import annotations

import aiohttp

from cronlease.app import health
from devcluster.processes import free_port


async def test_liveness_and_readiness_answer_from_their_own_checks() -> None:
    problems: dict[str, str | None] = {"live": None, "ready": "the Job watch has not listed"}
    checks = health.HealthChecks(
        liveness=lambda: problems["live"], readiness=lambda: problems["ready"]
    )
    port = free_port()
    runner = await health.serve(f"127.0.0.1:{port}", checks)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:

            async def answer(path: str) -> tuple[int, str]:
                async with client.get(path) as response:
                    return response.status, await response.text()

            assert await answer("/healthz") == (200, "ok\n")
            assert await answer("/readyz") == (503, "the Job watch has not listed\n")
            problems["ready"] = None
            assert await answer("/readyz") == (200, "ok\n")
            problems["live"] = "the Job watch of all namespaces has failed for 61 s"
            assert await answer("/healthz") == (503, problems["live"] + "\n")
            assert await answer("/readyz") == (200, "ok\n")
            assert (await answer("/metrics"))[0] == 404
    finally:
        await runner.cleanup()
