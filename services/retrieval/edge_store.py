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
    DENSE_ONLY,
    DENSE_VECTOR,
    HEAD_KIND,
    KEYWORD_INDEXES,
    KIND_KEY,
    RRF_K,
    SEARCH_MODES,
    SEQ_KEY,
    SERVED_KEYS,
    SPARSE_VECTOR,
    VERSION_KEY,
    ChunkRecord,
    CollectionInfo,
    DocumentHead,
    FusionMethod,
    Hit,
    SearchMode,
    SparseVector,
    check_collection_name,
    check_mode,
    head_point_id,
    hit_cosines,
    point_id,
)

log = logging.getLogger(__name__)

_SHARD_CONFIG = "edge_config.json"
"""File qdrant-edge writes into every shard directory it creates."""
DENSE_DATATYPE = qe.VectorStorageDatatype.Float16
"""How a new collection stores its dense vectors: half precision, half the memory a search scans.
Over the SciFact corpus (5,202 chunks) a hybrid top-10 took 1.30 ms instead of 1.69 ms in the
engine (300 claims, each after an encoder pass, as a query runs) and returned the same ten chunks
in the same order for all 300 claims; a stored vector's cosine to a query moves by under 1e-3.
A collection keeps the datatype it was created with (one created before this stays float32)."""
SEARCH_THREADS = 1
"""Threads of each shard's own search pool. One: a query searches the shard's segments in the
thread that calls it (the service's query pool already runs queries side by side), instead of
handing them to the engine's pool and waiting; a hybrid top-10 over the SciFact corpus took
0.76 ms instead of 1.13 ms (median of 600, load average 5), together with `PAYLOAD_MEMORY`."""
PAYLOAD_MEMORY = qe.Memory.Cached
"""Payload (chunk text and metadata) kept in memory once read, instead of read from its mmap'd
file on every hit (qdrant-edge's default, `Cold`); its size is about that of the stored text."""


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


def _match(key: str, value: str) -> qe.FieldCondition:
    return qe.FieldCondition(key=key, match=qe.MatchValue(value))


def _edge_filter(filter: Mapping[str, str] | None,
                 versions: Sequence[str] | None = None) -> qe.Filter | None:
    """Every key equal to its value; with `versions`, title and source only for chunks without
    a version, and a chunk's version one of `versions` (see `VectorStore.search`)."""
    filter = dict(filter or {})
    if versions is None:
        return qe.Filter(must=[_match(k, v) for k, v in sorted(filter.items())]) if filter \
            else None
    legacy = [_match(k, filter.pop(k)) for k in ("source", "title") if k in filter]
    return qe.Filter(
        must=[_match(k, v) for k, v in sorted(filter.items())],
        should=[qe.FieldCondition(key=VERSION_KEY, match=qe.MatchAny(list(versions))),
                qe.Filter(must=[qe.IsEmptyCondition(VERSION_KEY), *legacy])])


_NOT_HEAD = qe.Filter(must_not=[_match(KIND_KEY, HEAD_KIND)])
"""Chunks only."""


def _heads_filter(filter: Mapping[str, str] | None) -> qe.Filter:
    """Heads (whose payload equals each value of `filter`)."""
    return qe.Filter(must=[_match(KIND_KEY, HEAD_KIND),
                        *[_match(k, v) for k, v in sorted((filter or {}).items())]])


def _of_documents(document_ids: Sequence[str]) -> qe.FieldCondition:
    return qe.FieldCondition(key="document_id", match=qe.MatchAny(list(document_ids)))


def _stale_of(head: DocumentHead) -> qe.Filter:
    """Points of `head`'s document that are neither its version nor newer than it."""
    return qe.Filter(must=[_match("document_id", head.document_id)],
                     must_not=[qe.FieldCondition(key=SEQ_KEY, range=qe.RangeFloat(gt=head.seq)),
                               _match(VERSION_KEY, head.version)])


def _lower_seq(seq: int) -> qe.Filter:
    """Existing points with a seq below `seq` (the condition of a head's conditional upsert)."""
    return qe.Filter(must=[qe.FieldCondition(key=SEQ_KEY, range=qe.RangeFloat(lt=seq))])


def _create_indexes(shard: qe.EdgeShard) -> None:
    """The payload indexes filters and the head protocol use (a no-op where they exist)."""
    for key in KEYWORD_INDEXES:
        shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))
    shard.update(qe.UpdateOperation.create_field_index(SEQ_KEY, qe.PayloadSchemaType.Integer))


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
        self._modes: dict[str, frozenset[str]] = {}
        self._table_lock = threading.Lock()
        try:
            for path in sorted(self._collections_dir.iterdir()):
                if (path / _SHARD_CONFIG).is_file():
                    dim, modes, datatype = _shard_layout(path)
                    self._shards[path.name] = qe.EdgeShard.load(
                        str(path), _edge_config(dim, modes, datatype))
                    _create_indexes(self._shards[path.name])  # one made before heads lacks some
                    self._dims[path.name], self._modes[path.name] = dim, modes
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
            shard = qe.EdgeShard.create(
                str(path), _edge_config(dim, frozenset(SEARCH_MODES), DENSE_DATATYPE))
            _create_indexes(shard)
            self._shards[name] = shard
            self._dims[name] = dim
            self._modes[name] = frozenset(SEARCH_MODES)

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray,
               sparse: Sequence[SparseVector] | None = None,
               heads: Sequence[DocumentHead] = ()) -> None:
        if heads and len({head.seq for head in heads}) > 1:
            raise FailedPrecondition("heads written with chunks must share one seq")
        shard = self._shard(collection)
        self._check_vectors(collection, vectors, len(chunks))
        named = self._modes[collection] != DENSE_ONLY
        if sparse is not None and len(sparse) != len(chunks):
            raise FailedPrecondition(f"{len(sparse)} sparse vectors for {len(chunks)} chunks")
        points = []
        for index, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
            if not named:
                vector_data = vector.tolist()
            elif sparse is None:  # no sparse vector: the chunk serves dense search only
                vector_data = {DENSE_VECTOR: vector.tolist()}
            else:
                vector_data = {DENSE_VECTOR: vector.tolist(),
                               SPARSE_VECTOR: qe.SparseVector(
                                   sparse[index].indices, sparse[index].values)}
            points.append(qe.Point(
                point_id(collection, chunk.document_id, chunk.chunk_index, chunk.version),
                vector_data, chunk.payload()))
        points.extend(qe.Point(head_point_id(collection, h.document_id), {}, h.payload())
                      for h in heads)
        if points:  # chunks are new points: the condition only decides over existing heads
            shard.update(qe.UpdateOperation.upsert_points(
                points, condition=_lower_seq(heads[0].seq) if heads else None))

    def delete_document(self, collection: str, document_id: str) -> None:
        self._shard(collection).update(
            qe.UpdateOperation.delete_points_by_filter(_edge_filter({"document_id": document_id})))

    def search(self, collection: str, vector: np.ndarray | None, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, *, sparse: SparseVector | None = None,
               mode: SearchMode = "dense", fusion: FusionMethod = "dbsf",
               prefetch_limit: int = 100, versions: Sequence[str] | None = None) -> list[Hit]:
        shard = self._shard(collection)
        modes = self._modes[collection]
        check_mode(collection, mode, modes)
        edge_filter = _edge_filter(filter, versions)
        dense_name = None if modes == DENSE_ONLY else DENSE_VECTOR
        if mode != "sparse" or vector is not None:
            self._check_vectors(collection, vector[None, :], 1)
        if mode == "sparse" and _is_empty(sparse):
            return []  # the query has no indexed term (only stopwords or punctuation)
        if mode == "dense":
            query, prefetches = qe.Query.Nearest(vector.tolist(), using=dense_name), None
        elif mode == "sparse":
            query, prefetches = _sparse_query(sparse), None
        else:
            prefetches = [qe.Prefetch(limit=max(prefetch_limit, top_k), filter=edge_filter,
                                      query=qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR))]
            if not _is_empty(sparse):
                prefetches.append(qe.Prefetch(limit=max(prefetch_limit, top_k),
                                              filter=edge_filter, query=_sparse_query(sparse)))
            query = qe.Fusion.Dbsf() if fusion == "dbsf" else qe.Fusion.Rrf(k=RRF_K)
        points = shard.query(qe.QueryRequest(
            limit=top_k, query=query, prefetches=prefetches, filter=edge_filter,
            score_threshold=min_score, with_payload=True))
        cosines = hit_cosines(mode, vector, [p.score for p in points],
                              lambda: _stored_cosines(shard, vector, points))
        return [Hit.from_payload(str(point.id), point.score, point.payload, cosine)
                for point, cosine in zip(points, cosines, strict=True)]

    def modes(self, collection: str) -> frozenset[str]:
        self._shard(collection)
        return self._modes[collection]

    def fingerprints(self, collection: str, document_ids: Sequence[str]) -> dict[str, str]:
        shard = self._shard(collection)
        if not document_ids:
            return {}
        records = shard.retrieve([point_id(collection, d, 0) for d in document_ids],
                                 with_payload=True, with_vector=False)
        return {r.payload["document_id"]: r.payload.get("fingerprint", "") for r in records}

    def heads(self, collection: str, document_ids: Sequence[str],
              served_only: bool = False) -> dict[str, DocumentHead]:
        shard = self._shard(collection)
        if not document_ids:
            return {}
        selected = SERVED_KEYS if served_only else True
        heads = [DocumentHead.from_payload(r.payload)  # (each .payload access converts)
                 for r in shard.retrieve([head_point_id(collection, d) for d in document_ids],
                                         with_payload=selected, with_vector=False)]
        found = {head.document_id: head for head in heads}
        rest = [d for d in document_ids if d not in found]
        if rest:  # documents written before heads: their first chunk's payload
            found.update({head.document_id: head for head in (
                DocumentHead.from_payload(r.payload)
                for r in shard.retrieve([point_id(collection, d, 0) for d in rest],
                                        with_payload=selected, with_vector=False))})
        return found

    def commit_heads(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        shard = self._shard(collection)
        for seq in sorted({head.seq for head in heads}):
            shard.update(qe.UpdateOperation.upsert_points(
                [qe.Point(head_point_id(collection, h.document_id), {}, h.payload())
                 for h in heads if h.seq == seq], condition=_lower_seq(seq)))

    def max_seq(self, collection: str, document_ids: Sequence[str]) -> int:
        if not document_ids:
            return 0
        records, _ = self._shard(collection).scroll(qe.ScrollRequest(
            limit=1, filter=qe.Filter(must=[_of_documents(document_ids)]),
            order_by=qe.OrderBy(SEQ_KEY, direction=qe.Direction.Desc), with_payload=[SEQ_KEY]))
        return int(records[0].payload[SEQ_KEY]) if records else 0

    def version_counts(self, collection: str, versions: Sequence[str]) -> dict[str, int]:
        return self._facet(collection, VERSION_KEY, versions, _NOT_HEAD)

    def point_counts(self, collection: str, document_ids: Sequence[str]) -> dict[str, int]:
        return self._facet(collection, "document_id", document_ids, None)

    def remove_stale(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        if heads:
            self._shard(collection).update(qe.UpdateOperation.delete_points_by_filter(
                qe.Filter(should=[_stale_of(head) for head in heads])))

    def delete_versions(self, collection: str, document_id: str, up_to_seq: int) -> None:
        self._shard(collection).update(qe.UpdateOperation.delete_points_by_filter(qe.Filter(
            must=[_match("document_id", document_id)],
            must_not=[qe.FieldCondition(key=SEQ_KEY, range=qe.RangeFloat(gt=up_to_seq))])))

    def list_heads(self, collection: str, page_size: int, offset: str | None,
                   filter: Mapping[str, str] | None = None
                   ) -> tuple[list[DocumentHead], str | None]:
        records, next_offset = self._shard(collection).scroll(qe.ScrollRequest(
            offset=offset, limit=page_size,
            filter=_heads_filter(filter), with_payload=True))
        return ([DocumentHead.from_payload(r.payload) for r in records],
                None if next_offset is None else str(next_offset))

    def document_count(self, collection: str) -> int:
        return self._shard(collection).count(qe.CountRequest(
            exact=True, filter=_heads_filter(None)))

    def delete_collection(self, name: str) -> None:
        with self._table_lock:
            shard = self._shards.pop(name, None)
            if shard is None:
                raise NotFound(f"collection {name!r} does not exist")
            self._dims.pop(name, None)
            self._modes.pop(name, None)
            shard.close()
            shutil.rmtree(self._collections_dir / name)

    def _facet(self, collection: str, key: str, values: Sequence[str],
               extra: qe.Filter | None) -> dict[str, int]:
        if not values:
            return {}
        must: list = [qe.FieldCondition(key=key, match=qe.MatchAny(list(values)))]
        if extra is not None:
            must.append(extra)
        response = self._shard(collection).facet(qe.FacetRequest(
            key=key, limit=len(values), exact=True, filter=qe.Filter(must=must)))
        return {str(hit.value): hit.count for hit in response}

    def list_collections(self) -> list[CollectionInfo]:
        with self._table_lock:
            names = sorted(self._shards)
        return [CollectionInfo(name, self._dims[name], self.count(name)) for name in names]

    def count(self, collection: str) -> int:
        return self._shard(collection).count(qe.CountRequest(exact=True, filter=_NOT_HEAD))

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


def _stored_cosines(shard: qe.EdgeShard, vector: np.ndarray,
                    points: Sequence[qe.ScoredPoint]) -> list[float | None]:
    """The cosines of `points`' stored dense vectors to the query `vector`, in their order: a
    dense search restricted to their ids, whose scores are those cosines (None for a point an
    ingest deleted in between). Cheaper than reading the vectors back (with_vector) and
    multiplying them here: over the SciFact corpus 0.23 ms against 0.54 ms for a top-10, most of
    it making 3,840 Python floats into an array."""
    found = shard.query(qe.QueryRequest(
        limit=len(points), query=qe.Query.Nearest(vector.tolist(), using=DENSE_VECTOR),
        filter=qe.Filter(must=[qe.HasIdCondition({point.id for point in points})])))
    cosine = {point.id: point.score for point in found}
    return [cosine.get(point.id) for point in points]


def _is_empty(sparse: SparseVector | None) -> bool:
    return sparse is not None and not sparse.indices


def _sparse_query(sparse: SparseVector | None) -> qe.Query:
    if sparse is None:
        raise FailedPrecondition("a sparse or hybrid search needs the query's BM25 vector")
    return qe.Query.Nearest(qe.SparseVector(sparse.indices, sparse.values), using=SPARSE_VECTOR)


def _edge_config(dim: int, modes: frozenset[str],
                 datatype: qe.VectorStorageDatatype) -> qe.EdgeConfig:
    """A shard's configuration: named `dense` (cosine, `dim` components stored as `datatype`) and
    `bm25` (IDF) vectors, or for a dense-only shard of an earlier version its one unnamed vector;
    search in the caller's thread and payload cached in memory (applied again at every load)."""
    options = {"max_search_threads": SEARCH_THREADS, "payload_memory": PAYLOAD_MEMORY}
    dense = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Cosine, datatype=datatype)
    if modes == DENSE_ONLY:
        return qe.EdgeConfig(vectors=dense, **options)
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: dense},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        **options)


def _shard_layout(path: Path) -> tuple[int, frozenset[str], qe.VectorStorageDatatype]:
    """Dense vector size, search modes and storage datatype of an existing shard, from the config
    qdrant-edge wrote when creating it: named `dense` + `bm25` vectors, or one unnamed dense
    vector (an old one); float32 where the config names no datatype."""
    config = json.loads((path / _SHARD_CONFIG).read_text())
    vectors = config["vectors"]
    if DENSE_VECTOR in vectors and SPARSE_VECTOR in (config.get("sparse_vectors") or {}):
        dense, modes = vectors[DENSE_VECTOR], frozenset(SEARCH_MODES)
    else:
        dense, modes = vectors[""], DENSE_ONLY
    datatype = _DATATYPES.get(dense.get("datatype", "float32"))
    if datatype is None:
        raise FailedPrecondition(f"collection {path.name!r} stores vectors as "
                                 f"{dense['datatype']!r}, which this store does not read")
    return int(dense["size"]), modes, datatype


_DATATYPES = {"float32": qe.VectorStorageDatatype.Float32,
              "float16": qe.VectorStorageDatatype.Float16}
