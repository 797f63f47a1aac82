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
    FILTER_KEYS,
    ChunkRecord,
    CollectionInfo,
    Hit,
    check_collection_name,
    point_id,
)


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

    def ensure_collection(self, name: str, dim: int) -> None:
        check_collection_name(name)
        if self._client.collection_exists(name):
            size = self._dim(name)
            if size != dim:
                raise FailedPrecondition(
                    f"collection {name!r} holds {size}-d vectors, not {dim}-d")
            return
        self._client.create_collection(
            name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE))
        for key in FILTER_KEYS:
            self._client.create_payload_index(name, key, models.PayloadSchemaType.KEYWORD)

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray) -> None:
        self._require(collection)
        points = [
            models.PointStruct(id=point_id(collection, chunk.document_id, chunk.chunk_index),
                               vector=vector.tolist(), payload=chunk.payload())
            for chunk, vector in zip(chunks, vectors, strict=True)
        ]
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

    def search(self, collection: str, vector: np.ndarray, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None) -> list[Hit]:
        self._require(collection)
        response = self._client.query_points(
            collection,
            query=vector.tolist(),
            query_filter=_server_filter(filter),
            limit=top_k,
            score_threshold=min_score,
            with_payload=True,
        )
        return [Hit.from_payload(str(point.id), point.score, point.payload)
                for point in response.points]

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
        if not isinstance(vectors, models.VectorParams):
            raise FailedPrecondition(f"collection {name!r} has named vectors; expected one")
        return vectors.size

    def _require(self, collection: str) -> None:
        if not self._client.collection_exists(collection):
            raise NotFound(f"collection {collection!r} does not exist")
