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

import functools
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
VERSION_KEY = "version"
"""Payload key of the write id a chunk and its document's head carry (keyword index)."""
SEQ_KEY = "seq"
"""Payload key of a write's order (integer index): microseconds since the epoch, at least one more
than any earlier write of the same documents; kept below 2**53 so that the engines' range
conditions, which compare as float64, order every pair exactly."""
KIND_KEY = "kind"
"""Payload key that marks a document's head point ("document"); chunks have none."""
HEAD_KIND = "document"
SERVED_KEYS = ["document_id", VERSION_KEY, KIND_KEY, "title", "source"]
"""Payload keys of a head (or an old first chunk) that a search reads."""
KEYWORD_INDEXES = (*FILTER_KEYS, VERSION_KEY, KIND_KEY)
"""Payload keys both backends index as keywords."""

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


def point_id(collection: str, document_id: str, chunk_index: int, version: str = "") -> str:
    """Deterministic id of a chunk's point (UUIDv5). With a `version` (what this version
    writes) each write of a document has its own points, so a new version never overwrites the
    one searches serve; without, the id a chunk had before versions existed."""
    key = f"{collection}/{document_id}/{chunk_index}"
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{key}@{version}" if version else key))


@functools.lru_cache(maxsize=65_536)
def head_point_id(collection: str, document_id: str) -> str:
    """Id of a document's head point (UUIDv5): one per document, whatever its version. Cached:
    every search computes the ids of its hits' heads."""
    return str(uuid.uuid5(_POINT_NAMESPACE, f"{collection}/{document_id}#head"))


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
    in a chunk only without a `version` (the layout before heads), else in the head."""
    version: str = ""
    """Write id of the document version the chunk belongs to ("": the layout before versions)."""
    seq: int = 0
    """Order of that write (see SEQ_KEY)."""
    chunk_count: int = 0
    """Chunks of that version."""

    def payload(self) -> dict[str, Any]:
        if self.version:  # title, source and fingerprint live once, in the document's head
            return {"document_id": self.document_id, VERSION_KEY: self.version,
                    SEQ_KEY: self.seq, "chunk_index": self.chunk_index,
                    "chunk_count": self.chunk_count, "text": self.text,
                    "start_offset": self.start_offset, "end_offset": self.end_offset}
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
    version: str = ""
    """The version (write id) the chunk belongs to; "" for a chunk written before versions."""

    def with_head(self, title: str, source: str) -> Hit:
        """This hit with its document's title and source (from the head); cheaper than
        `dataclasses.replace`, which a search would call for every hit."""
        return Hit(self.chunk_id, self.document_id, self.chunk_index, title, self.text, source,
                   self.score, self.start_offset, self.end_offset, self.cosine_similarity,
                   self.version)

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
            version=payload.get(VERSION_KEY, ""),
        )


@dataclass(frozen=True)
class DocumentHead:
    """A document's head point: which version of it searches serve (`version`, written by the
    write numbered `seq`) and what that version is (`chunk_count` chunks, made from a document
    whose digest is `fingerprint`), with the document's title and source, stored once. A head is
    written only after every chunk of its version, and only over a head of a lower `seq`, so the
    version it names is always whole. `legacy` marks a pseudo-head read from the first chunk of
    a document written before heads existed (`version` "", `seq` 0, `chunk_count` unknown: 0)."""

    document_id: str
    version: str
    seq: int
    chunk_count: int
    fingerprint: str
    title: str
    source: str
    legacy: bool = False

    def payload(self) -> dict[str, Any]:
        return {KIND_KEY: HEAD_KIND, "document_id": self.document_id, VERSION_KEY: self.version,
                SEQ_KEY: self.seq, "chunk_count": self.chunk_count,
                "fingerprint": self.fingerprint, "title": self.title, "source": self.source}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> DocumentHead:
        if payload.get(KIND_KEY) != HEAD_KIND:  # the first chunk of a document without a head
            return cls(payload["document_id"], "", 0, 0, payload.get("fingerprint", ""),
                       payload.get("title", ""), payload.get("source", ""), legacy=True)
        return cls(payload["document_id"], payload[VERSION_KEY], int(payload.get(SEQ_KEY, 0)),
                   int(payload.get("chunk_count", 0)), payload.get("fingerprint", ""),
                   payload.get("title", ""), payload.get("source", ""))


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
               sparse: Sequence[SparseVector] | None = None,
               heads: Sequence[DocumentHead] = ()) -> None:
        """Stores `chunks` with `vectors` (float32 [len(chunks), dim]) and, where the collection
        has them, their BM25 `sparse` vectors (one per chunk); same ids overwrite. With `heads`
        (all of one seq), writes them after the chunks in the same store operation, as
        `commit_heads` does (each only over no head or one of a lower seq): one write-ahead-log
        record, applied whole or not at all."""
        ...

    def delete_document(self, collection: str, document_id: str) -> None:
        """Deletes every point of `document_id`, head included (no error when there is none)."""
        ...

    def heads(self, collection: str, document_ids: Sequence[str],
              served_only: bool = False) -> dict[str, DocumentHead]:
        """The head of each of `document_ids` that has one; for a document written before heads
        existed, a `legacy` pseudo-head read from its first chunk; absent ids are left out.
        `served_only` reads only what a search needs (SERVED_KEYS: version, title, source): the
        heads' seq, chunk_count and fingerprint are then 0 and ""."""
        ...

    def commit_heads(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        """Writes `heads` (all of one `seq`), each only where the document has no head or one of
        a lower seq (one conditional upsert: the engine checks and writes under one lock)."""
        ...

    def max_seq(self, collection: str, document_ids: Sequence[str]) -> int:
        """The highest `seq` of any point (head or chunk, of any version) of `document_ids`; 0
        when none has one."""
        ...

    def version_counts(self, collection: str, versions: Sequence[str]) -> dict[str, int]:
        """Chunks stored of each of `versions` (heads not counted); absent versions left out."""
        ...

    def point_counts(self, collection: str, document_ids: Sequence[str]) -> dict[str, int]:
        """Points (chunks of every version, and the head) of each of `document_ids`."""
        ...

    def remove_stale(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        """For each head, deletes the points of its document that are not its version's and not
        newer than it (older versions, their heads' predecessors, unfinished writes, chunks
        written before versions), in one delete; chunks of a newer write in progress stay."""
        ...

    def delete_versions(self, collection: str, document_id: str, up_to_seq: int) -> None:
        """Deletes every point of `document_id` (head included) whose seq is at most `up_to_seq`
        or that has none, in one delete; a newer write in progress keeps its points."""
        ...

    def list_heads(self, collection: str, page_size: int, offset: str | None,
                   filter: Mapping[str, str] | None = None
                   ) -> tuple[list[DocumentHead], str | None]:
        """Up to `page_size` heads in point-id order from point id `offset` (None: the first),
        and the id to continue from (None after the last); with `filter`, only heads whose
        payload equals each of its values (keys in FILTER_KEYS)."""
        ...

    def document_count(self, collection: str) -> int:
        """Documents (heads) stored in `collection`."""
        ...

    def delete_collection(self, name: str) -> None:
        """Deletes collection `name` and everything in it. Raises NotFound when absent."""
        ...

    def search(self, collection: str, vector: np.ndarray | None, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, *, sparse: SparseVector | None = None,
               mode: SearchMode = "dense", fusion: FusionMethod = "dbsf",
               prefetch_limit: int = 100, versions: Sequence[str] | None = None) -> list[Hit]:
        """The `top_k` best chunks for the query, best first.

        `mode` "dense" ranks by cosine similarity to `vector` (float32 [dim]); "sparse" by BM25
        with the query's `sparse` vector; "hybrid" prefetches `prefetch_limit` chunks by each and
        fuses the two lists with `fusion`. `filter` keeps chunks whose payload equals every given
        value (keys in FILTER_KEYS), in every stage; `min_score` drops results whose final score
        (see `Hit.score`) is below it. When `vector` is given, every hit carries its cosine
        similarity to it (`Hit.cosine_similarity`), in sparse mode too. With `versions`, the
        filter's title and source apply to chunks written before versions only (they carry
        them), and chunks with a version are kept only when it is one of `versions`.
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
        """Chunks stored in `collection` (of every version; heads not counted)."""
        ...

    def close(self) -> None:
        """Flushes and releases the store; it is unusable afterwards."""
        ...

    def check(self) -> None:
        """Raises `Unavailable` saying why when the store cannot serve: the server cannot be
        reached, or the embedded store is closed or its directory is gone. Cheap (one round trip
        at most): the readiness probe calls it every second."""
        ...
