"""The vector store interface the retrieval core talks to, and the records that cross it.

Two backends implement it: `EdgeStore` (embedded Qdrant on disk through `qdrant-edge-py`, the
default) and `ServerStore` (a Qdrant server through `qdrant-client`). A collection holds one point
per chunk: a unit-length vector compared by cosine similarity and a payload with the chunk's text,
its document's id, title and source, and its character offsets in the document text.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from libs.errors import InvalidArgument

COLLECTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Collection names: also directory names for the embedded store, so no dots or slashes."""

FILTER_KEYS = ("document_id", "source", "title")
"""Payload keys a search filter may name; both backends index them as keywords."""

_POINT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "mcts-mesh/retrieval/chunk")


def point_id(collection: str, document_id: str, chunk_index: int) -> str:
    """Deterministic id of a chunk's point (UUIDv5), so re-ingest overwrites the same points."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{collection}/{document_id}/{chunk_index}"))


def check_collection_name(name: str) -> None:
    """Raises InvalidArgument("collection") unless `name` matches ^[a-zA-Z0-9_-]{1,64}$."""
    if not COLLECTION_NAME.fullmatch(name):
        raise InvalidArgument("collection", f"{name!r} does not match {COLLECTION_NAME.pattern}")


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk to store. Offsets are characters into the document text, `end_offset` exclusive."""

    document_id: str
    chunk_index: int
    text: str
    title: str
    source: str
    start_offset: int
    end_offset: int

    def payload(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "chunk_index": self.chunk_index,
            "text": self.text,
            "title": self.title,
            "source": self.source,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
        }


@dataclass(frozen=True)
class Hit:
    """A stored chunk that matched a search; `score` is the cosine similarity in [-1, 1]."""

    chunk_id: str
    document_id: str
    chunk_index: int
    title: str
    text: str
    source: str
    score: float
    start_offset: int
    end_offset: int

    @classmethod
    def from_payload(cls, chunk_id: str, score: float, payload: Mapping[str, Any]) -> Hit:
        return cls(
            chunk_id=chunk_id,
            document_id=payload["document_id"],
            chunk_index=int(payload["chunk_index"]),
            title=payload.get("title", ""),
            text=payload["text"],
            source=payload.get("source", ""),
            score=float(score),
            start_offset=int(payload["start_offset"]),
            end_offset=int(payload["end_offset"]),
        )


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    dim: int
    chunk_count: int


class VectorStore(Protocol):
    """Collections of chunk vectors with payload, searched by cosine similarity.

    Implementations are safe to call from several threads at once. Errors: `NotFound` for a
    collection that does not exist (except in `ensure_collection`), `FailedPrecondition` for a
    vector size that does not match the collection's, `InvalidArgument("collection")` for a name
    outside ^[a-zA-Z0-9_-]{1,64}$.
    """

    def ensure_collection(self, name: str, dim: int) -> None:
        """Creates collection `name` for vectors of `dim` components unless it exists."""
        ...

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray) -> None:
        """Stores `chunks` with `vectors` (float32 [len(chunks), dim]); same ids overwrite."""
        ...

    def delete_document(self, collection: str, document_id: str) -> None:
        """Deletes every chunk of `document_id` (no error when there is none)."""
        ...

    def search(self, collection: str, vector: np.ndarray, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None) -> list[Hit]:
        """The `top_k` chunks most similar to `vector` (float32 [dim]), best first.

        `filter` keeps chunks whose payload equals every given value (keys in FILTER_KEYS);
        `min_score` drops chunks whose cosine similarity is below it.
        """
        ...

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection, sorted by name."""
        ...

    def count(self, collection: str) -> int:
        """Chunks stored in `collection`."""
        ...

    def close(self) -> None:
        """Flushes and releases the store; it is unusable afterwards."""
        ...

    def check(self) -> None:
        """Raises `Unavailable` saying why when the store cannot serve: the server cannot be
        reached, or the embedded store is closed or its directory is gone. Cheap (one round trip
        at most): the readiness probe calls it every second."""
        ...
