"""Fault injection for the crash tests: a `VectorStore` that stops the process after a given number
of point writes, at any point of an ingest (inside a batch, between batches, between the chunks
and the head, between the head and the cleanup).

Enabled only by `RETRIEVAL_FAULT_KILL_AFTER_WRITES` (unset in every deployment): `main` then wraps
the store in `KillAfterWrites`, whose default action is SIGKILL of the process itself, a crash
with no chance to flush or clean up.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from services.retrieval.store import ChunkRecord, DocumentHead, SparseVector, VectorStore


def kill_process() -> None:
    """SIGKILL of this process (never returns)."""
    os.kill(os.getpid(), signal.SIGKILL)


class KillAfterWrites:
    """A `VectorStore` that forwards everything to `store` and calls `action` (SIGKILL of this
    process by default) once `budget` write units are spent: each chunk upserted and each head
    committed is one unit (a batch that crosses the budget is written in part: the points that
    fit, then `action`), each delete one unit (applied when it fits). Reads are free."""

    def __init__(self, store: VectorStore, budget: int,
                 action: Callable[[], None] = kill_process) -> None:
        self._store = store
        self._left = budget
        self._action = action
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _take(self, units: int) -> int:
        """How many of `units` may be written before the action (all when within budget)."""
        with self._lock:
            allowed = min(units, max(self._left, 0))
            self._left -= units
            return allowed

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray,
               sparse: Sequence[SparseVector] | None = None,
               heads: Sequence[DocumentHead] = ()) -> None:
        """The chunks, then the heads (one unit each); cut where the budget ends (the engine
        writes one operation whole; this cuts it, a harder case)."""
        allowed = self._take(len(chunks) + len(heads))
        chunk_part, head_part = min(allowed, len(chunks)), max(0, allowed - len(chunks))
        if chunk_part:
            self._store.upsert(collection, chunks[:chunk_part], vectors[:chunk_part],
                               None if sparse is None else sparse[:chunk_part])
        if head_part:
            self._store.commit_heads(collection, heads[:head_part])
        if allowed < len(chunks) + len(heads):
            self._action()

    def commit_heads(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        allowed = self._take(len(heads))
        if allowed:
            self._store.commit_heads(collection, heads[:allowed])
        if allowed < len(heads):
            self._action()

    def remove_stale(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        self._delete(lambda: self._store.remove_stale(collection, heads))

    def delete_versions(self, collection: str, document_id: str, up_to_seq: int) -> None:
        self._delete(lambda: self._store.delete_versions(collection, document_id, up_to_seq))

    def delete_document(self, collection: str, document_id: str) -> None:
        self._delete(lambda: self._store.delete_document(collection, document_id))

    def _delete(self, delete: Callable[[], None]) -> None:
        if self._take(1):
            delete()
        else:
            self._action()
