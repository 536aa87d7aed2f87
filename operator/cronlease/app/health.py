"""/healthz and /readyz on one port, as controller-runtime serves them.

Liveness and readiness ask different questions. Liveness: should this process be restarted? Only
when a fresh start would help: the ScheduledJob or Job watch has failed for a minute. Readiness:
is this replica's view of the cluster synced? Not until both watches have listed every scope,
and not while one is failing. A standby is ready too: readiness is about the view, not the
Lease, so a rolling update waits for the new replica's model before it stops an old one.

kopf's own liveness endpoint serves one path, so this server replaces it (kopf's probes were only
our watch check).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

# A check returns None when all is well, else why not.
Check = Callable[[], str | None]


@dataclass(frozen=True)
class HealthChecks:
    liveness: Check
    readiness: Check


async def serve(bind: str, checks: HealthChecks) -> web.AppRunner:
    """Start serving; the caller cleans the returned runner up."""

    def answer(check: Check) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(_: web.Request) -> web.Response:
            problem = check()
            if problem is None:
                return web.Response(text="ok\n")
            return web.Response(status=503, text=problem + "\n")

        return handler

    app = web.Application()
    app.router.add_get("/healthz", answer(checks.liveness))
    app.router.add_get("/readyz", answer(checks.readiness))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    host, port = bind.rsplit(":", 1)
    await web.TCPSite(runner, host, int(port)).start()
    return runner
