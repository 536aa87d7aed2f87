"""Unit tests share one event loop: each test's background tasks end with it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from harness import Shell


@pytest.fixture(autouse=True)
async def drained_shells() -> AsyncIterator[None]:
    yield
    while Shell.made:
        await Shell.made.pop().applier.drain()
