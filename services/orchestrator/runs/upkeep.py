"""The run store's upkeep in each orchestrator: its reachability for `/ready`, the runs metrics
(runs by state, queue depth), and retention (finished runs purged `retention_s` after they
ended, ORCHESTRATOR_RUN_RETENTION).

One task, every `interval_s` seconds: a ping and the counts by state (one query); the purge every
`purge_every` rounds. Replicas sharing a PostgreSQL store each purge; the deletes are idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from libs.errors import MeshError
from services.orchestrator.dependencies import NOT_SERVING, SERVING, UNKNOWN
from services.orchestrator.metrics import RUN_QUEUE_DEPTH, RUNS
from services.orchestrator.runs.model import RunState
from services.orchestrator.runs.store import RunStore

log = logging.getLogger(__name__)

INTERVAL_S = 10.0
PURGE_EVERY = 6
"""Rounds between purges (a minute at the default interval)."""


class RunUpkeep:
    """The upkeep task over `store` (see the module docstring); `report()` is its /ready entry."""

    def __init__(self, store: RunStore, retention_s: float, interval_s: float = INTERVAL_S,
                 purge_every: int = PURGE_EVERY) -> None:
        self._store = store
        self._retention_s = retention_s
        self._interval_s = interval_s
        self._purge_every = purge_every
        self.state = UNKNOWN
        self.detail = "not checked yet"
        self._since = time.monotonic()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the task (its first round at once)."""
        self._task = asyncio.create_task(self._loop(), name="run-store-upkeep")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def report(self) -> list[dict[str, object]]:
        """The entry `/ready` lists: name "run_store", its URL (password masked) and state."""
        return [{"name": "run_store", "service": "run_store", "state": self.state,
                 "detail": f"{self._store.url}: {self.detail}",
                 "for_s": round(time.monotonic() - self._since, 1)}]

    async def once(self, purge: bool) -> None:
        """One round: counts (and the store's state), then the purge when `purge`."""
        try:
            counts = await self._store.counts_by_state()
            for state in RunState:
                RUNS.labels(state.value.lower()).set(counts.get(state, 0))
            RUN_QUEUE_DEPTH.set(counts.get(RunState.QUEUED, 0))
            if purge:
                purged = await self._store.purge_finished(self._retention_s)
                if purged:
                    log.info("run store: %d finished runs purged (retention %g s)", purged,
                             self._retention_s)
        except MeshError as error:
            self._set(NOT_SERVING, f"unavailable ({error.message})")
            return
        self._set(SERVING, "answered")

    async def _loop(self) -> None:
        rounds = 0
        while True:
            await self.once(purge=rounds % self._purge_every == 0)
            rounds += 1
            await asyncio.sleep(self._interval_s)

    def _set(self, state: str, detail: str) -> None:
        if state != self.state:
            self._since = time.monotonic()
            if state == NOT_SERVING:
                log.warning("run store %s: %s", self._store.url, detail)
            elif self.state == NOT_SERVING:
                log.info("run store %s reachable again", self._store.url)
        self.state, self.detail = state, detail
