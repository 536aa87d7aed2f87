"""Who may act. Every write carries the holder and fencing token of the leadership it acts under.

This module defines the interface the scheduler depends on; `SoleLeader` is the degenerate case
of one replica without election, used for development and single-replica installs.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Leadership(Protocol):
    identity: str

    @property
    def token(self) -> int: ...

    def is_leading(self) -> bool: ...

    async def wait_leading(self) -> None: ...

    async def verify(self) -> bool:
        """Re-check with the API server after a write was refused as stale."""
        ...


class SoleLeader:
    """Always the leader, with token 0: there is nobody to fence against."""

    def __init__(self, identity: str) -> None:
        self.identity = identity

    @property
    def token(self) -> int:
        return 0

    def is_leading(self) -> bool:
        return True

    async def wait_leading(self) -> None:
        await asyncio.sleep(0)

    async def verify(self) -> bool:
        return True
