"""Admission of solves and queries to the consensus loop: at most `max_running_solves` run at
once (ORCHESTRATOR_MAX_RUNNING_SOLVES), the others wait in arrival order until their deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from libs.errors import DeadlineExceeded
from services.orchestrator.metrics import SOLVES_WAITING


class RunningSolves:
    """A bound on the solves and queries running at once; none at 0."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._slots = asyncio.Semaphore(limit) if limit else None

    @contextlib.asynccontextmanager
    async def hold(self, deadline: float) -> AsyncIterator[None]:
        """Holds one slot for a solve's consensus loop; a solve waits for one in arrival order,
        until `deadline` (`time.monotonic()`) at most.

        Raises:
            DeadlineExceeded: the deadline passed while the solve waited.
        """
        slots = self._slots
        if slots is None:
            yield
            return
        SOLVES_WAITING.inc()
        try:
            await asyncio.wait_for(slots.acquire(), max(0.0, deadline - time.monotonic()))
        except TimeoutError as error:
            raise DeadlineExceeded(
                f"the deadline passed while {self._limit} other solves "
                "and queries ran (ORCHESTRATOR_MAX_RUNNING_SOLVES)") from error
        finally:
            SOLVES_WAITING.dec()
        try:
            yield
        finally:
            slots.release()
