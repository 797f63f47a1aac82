"""`ServerStore`: the `VectorStore` on a Qdrant server through `qdrant-client`.

Selected when `RETRIEVAL_QDRANT_URL` is set. Tests pass `QdrantClient(":memory:")`, qdrant-client's
in-process double of the server API (a test double only: it ignores payload indexes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from qdrant_client import QdrantClient, models

from libs.errors import FailedPrecondition, NotFound, Unavailable
from services.retrieval.store import (
    DENSE_ONLY,
    DENSE_VECTOR,
    FILTER_KEYS,
    RRF_K,
    SEARCH_MODES,
    SPARSE_VECTOR,
    ChunkRecord,
    CollectionInfo,
    FusionMethod,
    Hit,
    SearchMode,
    SparseVector,
    check_collection_name,
    check_mode,
    hit_cosines,
    point_id,
)


def _sparse(sparse: SparseVector | None) -> models.SparseVector:
    if sparse is None:
        raise FailedPrecondition("a sparse or hybrid search needs the query's BM25 vector")
    return models.SparseVector(indices=sparse.indices, values=sparse.values)


def _server_filter(filter: Mapping[str, str] | None) -> models.Filter | None:
    if not filter:
        return None
    return models.Filter(must=[
        models.FieldCondition(key=key, match=models.MatchValue(value=value))
        for key, value in sorted(filter.items())
    ])


class ServerStore:
    """The `VectorStore` behind a `QdrantClient` (thread-safe as the client is). Writes wait for
    the server to apply them (`wait=True`), so a search right after an upsert sees it."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._modes: dict[str, frozenset[str]] = {}

    def ensure_collection(self, name: str, dim: int) -> None:
        check_collection_name(name)
        if self._client.collection_exists(name):
            size = self._dim(name)
            if size != dim:
                raise FailedPrecondition(
                    f"collection {name!r} holds {size}-d vectors, not {dim}-d")
            return
        self._client.create_collection(
            name,
            # Half-precision storage, as the embedded store (see edge_store.DENSE_DATATYPE).
            vectors_config={DENSE_VECTOR: models.VectorParams(
                size=dim, distance=models.Distance.COSINE, datatype=models.Datatype.FLOAT16)},
            sparse_vectors_config={
                SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        for key in FILTER_KEYS:
            self._client.create_payload_index(name, key, models.PayloadSchemaType.KEYWORD)

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray,
               sparse: Sequence[SparseVector] | None = None) -> None:
        named = self.modes(collection) != DENSE_ONLY
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
                               SPARSE_VECTOR: models.SparseVector(
                                   indices=sparse[index].indices, values=sparse[index].values)}
            points.append(models.PointStruct(
                id=point_id(collection, chunk.document_id, chunk.chunk_index),
                vector=vector_data, payload=chunk.payload()))
        if points:
            self._client.upsert(collection, points=points, wait=True)

    def delete_document(self, collection: str, document_id: str) -> None:
        self._require(collection)
        self._client.delete(
            collection,
            points_selector=models.FilterSelector(
                filter=_server_filter({"document_id": document_id})),
            wait=True,
        )

    def search(self, collection: str, vector: np.ndarray | None, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, *, sparse: SparseVector | None = None,
               mode: SearchMode = "dense", fusion: FusionMethod = "dbsf",
               prefetch_limit: int = 100) -> list[Hit]:
        modes = self.modes(collection)
        check_mode(collection, mode, modes)
        server_filter = _server_filter(filter)
        if mode == "sparse" and sparse is not None and not sparse.indices:
            return []  # the query has no indexed term (only stopwords or punctuation)
        prefetch = None
        using = None
        if mode == "dense":
            query = vector.tolist()
            using = None if modes == DENSE_ONLY else DENSE_VECTOR
        elif mode == "sparse":
            query, using = _sparse(sparse), SPARSE_VECTOR
        else:
            limit = max(prefetch_limit, top_k)
            prefetch = [models.Prefetch(query=vector.tolist(), using=DENSE_VECTOR,
                                        filter=server_filter, limit=limit)]
            if sparse is not None and sparse.indices:
                prefetch.append(models.Prefetch(query=_sparse(sparse), using=SPARSE_VECTOR,
                                                filter=server_filter, limit=limit))
            query = (models.FusionQuery(fusion=models.Fusion.DBSF) if fusion == "dbsf"
                     else models.RrfQuery(rrf=models.Rrf(k=RRF_K)))
        # Dense scores are the cosines; other modes read each hit's dense vector back to get it.
        with_vectors = [DENSE_VECTOR] if mode != "dense" and vector is not None else False
        response = self._client.query_points(
            collection, query=query, using=using, prefetch=prefetch,
            query_filter=server_filter, limit=top_k, score_threshold=min_score,
            with_payload=True, with_vectors=with_vectors,
        )
        points = response.points
        cosines = hit_cosines(
            mode, vector if with_vectors else None, [p.score for p in points],
            lambda: (np.asarray([p.vector[DENSE_VECTOR] for p in points], dtype=np.float32)
                     @ vector).tolist())
        return [Hit.from_payload(str(point.id), point.score, point.payload, cosine)
                for point, cosine in zip(points, cosines, strict=True)]

    def modes(self, collection: str) -> frozenset[str]:
        cached = self._modes.get(collection)
        if cached is not None:
            return cached
        self._require(collection)
        params = self._client.get_collection(collection).config.params
        if (isinstance(params.vectors, dict) and DENSE_VECTOR in params.vectors
                and SPARSE_VECTOR in (params.sparse_vectors or {})):
            modes = frozenset(SEARCH_MODES)
        else:
            modes = DENSE_ONLY
        self._modes[collection] = modes
        return modes

    def fingerprints(self, collection: str, document_ids: Sequence[str]) -> dict[str, str]:
        self._require(collection)
        if not document_ids:
            return {}
        records = self._client.retrieve(
            collection, ids=[point_id(collection, d, 0) for d in document_ids],
            with_payload=True, with_vectors=False)
        return {r.payload["document_id"]: r.payload.get("fingerprint", "") for r in records}

    def list_collections(self) -> list[CollectionInfo]:
        names = sorted(c.name for c in self._client.get_collections().collections)
        return [CollectionInfo(name, self._dim(name), self.count(name)) for name in names]

    def count(self, collection: str) -> int:
        self._require(collection)
        return self._client.count(collection, exact=True).count

    def close(self) -> None:
        self._client.close()

    def check(self) -> None:
        try:
            self._client.get_collections()
        except Exception as error:  # noqa: BLE001 - any failure to answer means unreachable
            raise Unavailable(f"cannot reach the Qdrant server: {type(error).__name__}: "
                              f"{error}") from error

    def _dim(self, name: str) -> int:
        vectors = self._client.get_collection(name).config.params.vectors
        if isinstance(vectors, dict) and DENSE_VECTOR in vectors:
            return vectors[DENSE_VECTOR].size
        if not isinstance(vectors, models.VectorParams):
            raise FailedPrecondition(f"collection {name!r} has no {DENSE_VECTOR!r} vector")
        return vectors.size

    def _require(self, collection: str) -> None:
        if not self._client.collection_exists(collection):
            raise NotFound(f"collection {collection!r} does not exist")
