"""The vector store interface the retrieval core talks to, and the records that cross it.

Two backends implement it: `EdgeStore` (embedded Qdrant on disk through `qdrant-edge-py`, the
default) and `ServerStore` (a Qdrant server through `qdrant-client`). A collection holds one point
per chunk: a unit-length vector compared by cosine similarity and a payload with the chunk's text,
its document's id, title and source, and its character offsets in the document text.

A collection made by this version holds two vectors per point: `dense` (the sentence embedding,
cosine) and `bm25` (a BM25 term-frequency sparse vector from the engine's built-in `Bm25`
embedder, scored with the engine's IDF modifier, so the inverse document frequencies follow the
collection as it grows; Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and
Beyond", 2009). Hybrid search prefetches both and fuses them in the engine with Distribution-Based
Score Fusion (DBSF: each list's scores normalised by mean +- 3 standard deviations, then summed) or
Reciprocal Rank Fusion (RRF, Cormack et al., SIGIR 2009: sum of 1 / (k + rank)). A collection made
by an earlier version holds one unnamed dense vector: it serves dense search only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from libs.errors import InvalidArgument

COLLECTION_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Collection names: also directory names for the embedded store, so no dots or slashes."""

FILTER_KEYS = ("document_id", "source", "title")
"""Payload keys a search filter may name; both backends index them as keywords."""

DENSE_VECTOR = "dense"
"""Name of the dense vector in a collection."""
SPARSE_VECTOR = "bm25"
"""Name of the BM25 sparse vector in a collection."""

SearchMode = Literal["dense", "sparse", "hybrid"]
FusionMethod = Literal["dbsf", "rrf"]
SEARCH_MODES: tuple[SearchMode, ...] = ("dense", "sparse", "hybrid")
DENSE_ONLY: frozenset[str] = frozenset({"dense"})
"""Modes of a collection made before sparse vectors existed (one unnamed dense vector)."""
RRF_K = 60
"""k of reciprocal rank fusion (Cormack et al. 2009's value)."""


@dataclass(frozen=True)
class SparseVector:
    """A sparse vector: parallel lists of dimension indices (token hashes) and weights."""

    indices: list[int]
    values: list[float]


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
    fingerprint: str = ""
    """Digest of what the document's chunks were made from (see `Retriever.fingerprint`); stored
    so that a re-ingest of an unchanged document can be skipped."""

    def payload(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
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
    """A stored chunk that matched a search. `score` is the mode's score: cosine similarity in
    [-1, 1] for dense, the BM25 score (>= 0) for sparse, the fused score for hybrid (DBSF: a sum of
    normalised scores, about 0..2; RRF: a sum of 1 / (60 + rank)). `cosine_similarity` is the
    cosine of the chunk's dense vector to the query's in [-1, 1] whatever the mode (equal to
    `score` for dense), None when the search had no dense query vector."""

    chunk_id: str
    document_id: str
    chunk_index: int
    title: str
    text: str
    source: str
    score: float
    start_offset: int
    end_offset: int
    cosine_similarity: float | None = None

    @classmethod
    def from_payload(cls, chunk_id: str, score: float, payload: Mapping[str, Any],
                     cosine_similarity: float | None = None) -> Hit:
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
            cosine_similarity=cosine_similarity,
        )


def hit_cosines(mode: SearchMode, query: np.ndarray | None, scores: Sequence[float],
                stored: Callable[[], list[float | None]]) -> list[float | None]:
    """Each hit's cosine similarity to the query's dense vector, in [-1, 1]: its score in dense
    mode; else, with a query vector, `stored()`, the cosines of the hits' stored dense vectors
    to it, in the hits' order (the store computes them: both are of L2 norm 1, the encoder
    normalises the query and Qdrant the vectors of a cosine collection); None for every hit
    without one."""
    if mode == "dense":
        return [float(score) for score in scores]
    if query is None:
        return [None] * len(scores)
    if not scores:
        return []
    return stored()


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    dim: int
    chunk_count: int


def check_mode(collection: str, mode: str, modes: frozenset[str]) -> None:
    """Raises InvalidArgument("mode") when `mode` is not among the collection's `modes`."""
    if mode not in modes:
        raise InvalidArgument(
            "mode", f"collection {collection!r} was built for {sorted(modes)} search only, not "
                    f"{mode!r}; re-ingest its documents into a new collection for {mode!r}")


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

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray,
               sparse: Sequence[SparseVector] | None = None) -> None:
        """Stores `chunks` with `vectors` (float32 [len(chunks), dim]) and, where the collection
        has them, their BM25 `sparse` vectors (one per chunk); same ids overwrite."""
        ...

    def delete_document(self, collection: str, document_id: str) -> None:
        """Deletes every chunk of `document_id` (no error when there is none)."""
        ...

    def search(self, collection: str, vector: np.ndarray | None, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, *, sparse: SparseVector | None = None,
               mode: SearchMode = "dense", fusion: FusionMethod = "dbsf",
               prefetch_limit: int = 100) -> list[Hit]:
        """The `top_k` best chunks for the query, best first.

        `mode` "dense" ranks by cosine similarity to `vector` (float32 [dim]); "sparse" by BM25
        with the query's `sparse` vector; "hybrid" prefetches `prefetch_limit` chunks by each and
        fuses the two lists with `fusion`. `filter` keeps chunks whose payload equals every given
        value (keys in FILTER_KEYS), in every stage; `min_score` drops results whose final score
        (see `Hit.score`) is below it. When `vector` is given, every hit carries its cosine
        similarity to it (`Hit.cosine_similarity`), in sparse mode too.
        Raises:
            InvalidArgument("mode"): the collection was not built for `mode` (see `modes`).
        """
        ...

    def modes(self, collection: str) -> frozenset[str]:
        """Search modes the collection was built for (all three, or only dense for an old one)."""
        ...

    def fingerprints(self, collection: str, document_ids: Sequence[str]) -> dict[str, str]:
        """The stored fingerprint of each of `document_ids` that has chunks (read from its first
        chunk); ids that are absent are left out."""
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
