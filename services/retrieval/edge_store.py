"""`EdgeStore`: embedded Qdrant on disk through `qdrant-edge-py` (the Qdrant engine in-process).

Layout under `data_dir`: `LOCK` (an exclusive `flock` held while the store is open, so one process
at a time owns the directory) and `collections/<name>/`, one Edge shard per collection. Shards keep
a write-ahead log, so an acknowledged upsert survives a hard kill of the process; `close()` also
flushes the segments.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import qdrant_edge as qe

from libs.errors import FailedPrecondition, NotFound, Unavailable
from services.retrieval.store import (
    FILTER_KEYS,
    ChunkRecord,
    CollectionInfo,
    Hit,
    check_collection_name,
    point_id,
)

log = logging.getLogger(__name__)

_SHARD_CONFIG = "edge_config.json"
"""File qdrant-edge writes into every shard directory it creates."""


class DataDirLocked(FailedPrecondition):
    """Another process holds the store's directory."""


class _DirectoryLock:
    """An exclusive, non-blocking `flock` on `<directory>/LOCK`; the kernel drops it if the process
    dies, so a hard kill never leaves a stale lock."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "LOCK"
        self._file = open(self.path, "a+")  # held open (and locked) while the store is open
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise DataDirLocked(
                f"retrieval data directory {directory} is in use by another process "
                f"(pid {holder}); only one retrieval service may open it"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(str(os.getpid()))
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def release(self) -> None:
        if not self._file.closed:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()


def _edge_filter(filter: Mapping[str, str] | None) -> qe.Filter | None:
    if not filter:
        return None
    return qe.Filter(must=[qe.FieldCondition(key=key, match=qe.MatchValue(value))
                           for key, value in sorted(filter.items())])


class EdgeStore:
    """The `VectorStore` on local disk. Thread-safe: the engine serves concurrent reads and writes;
    a lock only guards the table of open shards.

    Raises (on open):
        DataDirLocked: another process has `data_dir` open.
    """

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _DirectoryLock(self.data_dir)
        self._collections_dir = self.data_dir / "collections"
        self._collections_dir.mkdir(exist_ok=True)
        self._shards: dict[str, qe.EdgeShard] = {}
        self._dims: dict[str, int] = {}
        self._table_lock = threading.Lock()
        try:
            for path in sorted(self._collections_dir.iterdir()):
                if (path / _SHARD_CONFIG).is_file():
                    self._shards[path.name] = qe.EdgeShard.load(str(path))
                    self._dims[path.name] = _shard_dim(path)
        except BaseException:
            self.close()
            raise
        log.info("edge store at %s: %d collections", self.data_dir, len(self._shards))

    def ensure_collection(self, name: str, dim: int) -> None:
        check_collection_name(name)
        with self._table_lock:
            if name in self._shards:
                if self._dims[name] != dim:
                    raise FailedPrecondition(
                        f"collection {name!r} holds {self._dims[name]}-d vectors, not {dim}-d")
                return
            path = self._collections_dir / name
            if path.exists():
                # A directory without the shard's config is what a crash during create leaves.
                shutil.rmtree(path)
            vectors = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine)
            config = qe.EdgeConfig(vectors=vectors)
            shard = qe.EdgeShard.create(str(path), config)
            for key in FILTER_KEYS:
                shard.update(
                    qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))
            self._shards[name] = shard
            self._dims[name] = dim

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray) -> None:
        shard = self._shard(collection)
        self._check_vectors(collection, vectors, len(chunks))
        points = [
            qe.Point(point_id(collection, chunk.document_id, chunk.chunk_index),
                     vector.tolist(), chunk.payload())
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
        if points:
            shard.update(qe.UpdateOperation.upsert_points(points))

    def delete_document(self, collection: str, document_id: str) -> None:
        self._shard(collection).update(
            qe.UpdateOperation.delete_points_by_filter(_edge_filter({"document_id": document_id})))

    def search(self, collection: str, vector: np.ndarray, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None) -> list[Hit]:
        shard = self._shard(collection)
        self._check_vectors(collection, vector[None, :], 1)
        points = shard.query(qe.QueryRequest(
            limit=top_k,
            query=qe.Query.Nearest(vector.tolist()),
            filter=_edge_filter(filter),
            score_threshold=min_score,
            with_payload=True,
        ))
        return [Hit.from_payload(str(point.id), point.score, point.payload) for point in points]

    def list_collections(self) -> list[CollectionInfo]:
        with self._table_lock:
            names = sorted(self._shards)
        return [CollectionInfo(name, self._dims[name], self.count(name)) for name in names]

    def count(self, collection: str) -> int:
        return self._shard(collection).count(qe.CountRequest(exact=True))

    def close(self) -> None:
        with self._table_lock:
            for shard in self._shards.values():
                shard.flush()
                shard.close()
            self._shards.clear()
        self._lock.release()

    def check(self) -> None:
        if self._lock.closed:
            raise Unavailable(f"the embedded store at {self.data_dir} is closed")
        if not self._collections_dir.is_dir():
            raise Unavailable(f"the embedded store's directory {self._collections_dir} is gone")
        if not os.access(self._collections_dir, os.W_OK):
            raise Unavailable(f"the embedded store's directory {self._collections_dir} is not "
                              f"writable")

    def _shard(self, collection: str) -> qe.EdgeShard:
        with self._table_lock:
            shard = self._shards.get(collection)
        if shard is None:
            raise NotFound(f"collection {collection!r} does not exist")
        return shard

    def _check_vectors(self, collection: str, vectors: np.ndarray, rows: int) -> None:
        expected = (rows, self._dims[collection])
        if vectors.shape != expected:
            raise FailedPrecondition(
                f"vectors for {collection!r} must have shape {expected}, got {vectors.shape}")


def _shard_dim(path: Path) -> int:
    """Vector size of an existing shard, from the config qdrant-edge wrote when creating it."""
    config = json.loads((path / _SHARD_CONFIG).read_text())
    return int(config["vectors"][""]["size"])
