"""The retrieval core: chunk, embed and store documents; embed a query and search a collection.

No gRPC here: the servicer validates requests and converts messages. Each chunk is embedded as
`(title + " " + chunk text).strip()` (the title's first EMBED_TITLE_CHARS), the way BEIR and
MTEB embed a titled passage for sentence-transformers models, both densely (the sentence
embedder) and as a BM25 sparse vector (the engine's `Bm25` embedder: term frequencies with k1
1.2, b 0.75, English stemming and stopwords; the store applies IDF); the stored text is the chunk
alone, and the title is stored once, in the document's head.

An ingest first reads each document's head and skips documents whose head has the same
fingerprint and whose version is stored whole; it embeds the rest, checking between embedding
batches whether the caller still waits (`should_stop`), and only then writes, with the head
protocol of `versions` (new chunks first, then the head that makes them current, then the old
versions' removal): a cancelled or expired ingest writes nothing, a failed or killed one leaves
each document's previous version served whole, and its retry converges to the new one.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import qdrant_edge as qe

from libs.errors import DeadlineExceeded, NotFound, ResourceExhausted
from services.retrieval import versions
from services.retrieval.chunking import chunk_text
from services.retrieval.store import (
    DENSE_ONLY,
    ChunkRecord,
    CollectionInfo,
    DocumentHead,
    FusionMethod,
    Hit,
    SearchMode,
    SparseVector,
    VectorStore,
)

UPSERT_BATCH = versions.UPSERT_BATCH
"""Points per store write."""
EMBED_SLICE = 128
"""Chunks embedded between two checks that the caller still waits."""
PREFETCH_LIMIT = 100
"""Chunks each ranking of a hybrid search contributes to the fusion."""
EMBED_TITLE_CHARS = 512
"""Characters of a title embedded with each chunk (titles may hold 1,024): about half the
encoder's 256 word pieces at most, so a long title neither crowds the chunk's own text out of its
vector nor costs more than this per chunk. Every BEIR SciFact title (at most 300) is embedded
whole, as BEIR and MTEB embed a titled passage."""


class DocumentFields(Protocol):
    """What ingest reads from a document (`mesh.common.v1.Document` has these fields)."""

    id: str
    title: str
    text: str
    source: str


class TextEmbedder(Protocol):
    """`embed(texts)` returns float32 [len(texts), dim] unit vectors."""

    dim: int
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class Stopped(DeadlineExceeded):
    """The caller cancelled or its deadline passed before the write; nothing was written."""


@dataclass(frozen=True)
class IngestResult:
    """What an ingest did. `document_count` counts new and updated documents (not skipped ones);
    `updated_ids` are the documents whose stored version was replaced."""

    document_count: int
    chunk_count: int
    skipped_count: int = 0
    updated_ids: tuple[str, ...] = ()

    @property
    def updated_count(self) -> int:
        return len(self.updated_ids)


class Bm25Embedder:
    """BM25 sparse vectors from qdrant-edge's built-in `Bm25` (defaults: k1 1.2, b 0.75, average
    length 256 tokens, English tokenizer, stemmer and stopwords). Documents get term-frequency
    weights; a query gets weight 1 per distinct term; the collection's IDF modifier supplies the
    inverse document frequencies at search time."""

    def __init__(self) -> None:
        self._model = qe.Bm25()

    def embed_documents(self, texts: Sequence[str]) -> list[SparseVector]:
        return [_sparse(self._model.embed_document(text)) for text in texts]

    def embed_query(self, text: str) -> SparseVector:
        return _sparse(self._model.embed_query(text))


def _sparse(vector: qe.SparseVector) -> SparseVector:
    return SparseVector(list(vector.indices), list(vector.values))


@dataclass(frozen=True)
class StoreLimits:
    """Caps on what a deployment stores (from RetrievalSettings)."""

    max_collections: int = 100
    max_documents_per_collection: int = 100_000


class Retriever:
    """Ingest and dense / sparse / hybrid search over a `VectorStore`. Thread-safe, and safe
    beside other writers of the same store (other threads, other replicas on one Qdrant server):
    every write follows the head protocol of `versions`, so each document ends with one whole
    version. Only collection creation is serialised in this process."""

    def __init__(self, store: VectorStore, embedder: TextEmbedder, chunk_size: int,
                 chunk_overlap: int, sparse_embedder: Bm25Embedder | None = None,
                 limits: StoreLimits = StoreLimits()) -> None:
        self.store = store
        self.embedder = embedder
        self.sparse_embedder = sparse_embedder or Bm25Embedder()
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.limits = limits
        self._create_lock = threading.Lock()

    def fingerprint(self, document: DocumentFields) -> str:
        """SHA-256 (hex) of everything a document's stored chunks derive from: its text, title
        and source, the chunking settings and the embedder's name."""
        digest = hashlib.sha256()
        for part in (self.embedder.name, str(self.chunk_size), str(self.chunk_overlap),
                     document.title, document.source, document.text):
            encoded = part.encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "little"))
            digest.update(encoded)
        return digest.hexdigest()

    def chunks_of(self, document: DocumentFields, fingerprint: str = "") -> list[ChunkRecord]:
        """The chunks a document is stored as (none for blank text)."""
        return [
            ChunkRecord(document_id=document.id, chunk_index=chunk.index, text=chunk.text,
                        title=document.title, source=document.source,
                        start_offset=chunk.start, end_offset=chunk.end, fingerprint=fingerprint)
            for chunk in chunk_text(document.text, self.chunk_size, self.chunk_overlap)
        ]

    def ingest(self, collection: str, documents: Sequence[DocumentFields],
               should_stop: Callable[[], bool] | None = None) -> IngestResult:
        """Chunks, embeds and stores `documents` in `collection` (created if absent). A document
        whose head has the same fingerprint and whose version is stored whole is skipped; any
        other gets a new version, which replaces the served one only once it is stored whole.

        All embedding happens before the first write, so a failure there writes nothing, and so
        does `should_stop()` turning true before the write (checked every EMBED_SLICE chunks).
        Raises:
            InvalidArgument("collection"): an invalid collection name.
            FailedPrecondition: the collection holds vectors of another size.
            ResourceExhausted: a new collection beyond `limits.max_collections`, or new documents
                beyond `limits.max_documents_per_collection` (nothing written).
            Stopped: `should_stop()` turned true; nothing was written.
        """
        should_stop = should_stop or (lambda: False)
        fingerprints = {document.id: self.fingerprint(document) for document in documents}
        try:
            dense_only = self.store.modes(collection) == DENSE_ONLY
            heads = self.store.heads(collection, [document.id for document in documents])
            unchanged = versions.whole_versions(self.store, collection, heads, fingerprints)
            exists = True
        except NotFound:  # created below, right before the first write
            dense_only, heads, unchanged, exists = False, {}, set(), False
        changed = [d for d in documents if d.id not in unchanged]
        self._check_limits(collection, exists, sum(1 for d in changed if d.id not in heads))
        updated = tuple(d.id for d in changed if d.id in heads)
        by_document = {d.id: self.chunks_of(d, fingerprints[d.id]) for d in changed}
        records = [record for chunks in by_document.values() for record in chunks]
        vectors, sparse = self._embed(records, dense_only, should_stop)
        if should_stop():
            raise Stopped("ingest stopped before writing: the caller cancelled or its deadline "
                          "passed; nothing was written")
        if changed:
            with self._create_lock:
                self.store.ensure_collection(collection, self.embedder.dim)
            seq = versions.next_seq(self.store, collection, list(by_document))
            records, new = versions.new_heads(
                by_document, fingerprints, {d.id: d.title for d in changed},
                {d.id: d.source for d in changed}, seq)
            versions.write_versions(self.store, collection, records, vectors,
                                    None if dense_only else sparse, new)
        return IngestResult(document_count=len(changed), chunk_count=len(records),
                            skipped_count=len(documents) - len(changed), updated_ids=updated)

    def _embed(self, records: Sequence[ChunkRecord], dense_only: bool,
               should_stop: Callable[[], bool]) -> tuple[np.ndarray, list[SparseVector]]:
        """Dense vectors float32 [len(records), dim] and BM25 vectors (none when `dense_only`)
        of `(title[:EMBED_TITLE_CHARS] + " " + text).strip()` of each record. Raises Stopped."""
        texts = [f"{r.title[:EMBED_TITLE_CHARS]} {r.text}".strip() for r in records]
        vectors = np.zeros((len(records), self.embedder.dim), dtype=np.float32)
        sparse: list[SparseVector] = []
        for begin in range(0, len(texts), EMBED_SLICE):
            if should_stop():
                raise Stopped("ingest stopped before writing: the caller cancelled or its "
                              "deadline passed; nothing was written")
            piece = texts[begin:begin + EMBED_SLICE]
            vectors[begin:begin + len(piece)] = self.embedder.embed(piece)
            if not dense_only:
                sparse.extend(self.sparse_embedder.embed_documents(piece))
        return vectors, sparse

    def _check_limits(self, collection: str, exists: bool, new_documents: int) -> None:
        """Raises ResourceExhausted naming the limit a write would pass (checked before it; two
        writers at once may each pass the check and together exceed a cap by their batches)."""
        if not exists:
            count = len(self.store.list_collections())
            if count >= self.limits.max_collections:
                raise ResourceExhausted(
                    f"collection {collection!r} would be collection {count + 1}; at most "
                    f"{self.limits.max_collections} per deployment (RETRIEVAL_MAX_COLLECTIONS)")
            stored = 0
        elif new_documents:
            stored = self.store.document_count(collection)
        else:
            return
        if stored + new_documents > self.limits.max_documents_per_collection:
            raise ResourceExhausted(
                f"collection {collection!r} holds {stored} documents; {new_documents} new ones "
                f"would pass the limit of {self.limits.max_documents_per_collection} "
                "(RETRIEVAL_MAX_DOCUMENTS_PER_COLLECTION)")

    def resolve_mode(self, collection: str, mode: SearchMode | None) -> SearchMode:
        """`mode`, or when None the best the collection supports (hybrid, else dense).

        Raises:
            NotFound: the collection does not exist.
        """
        if mode is not None:
            return mode
        return "dense" if self.store.modes(collection) == DENSE_ONLY else "hybrid"

    def search(self, collection: str, query: str, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, mode: SearchMode | None = "dense",
               fusion: FusionMethod = "dbsf") -> list[Hit]:
        """The `top_k` best chunks of `collection` for `query`, best first (see
        `VectorStore.search`; `mode` None picks hybrid where the collection has BM25 vectors).
        The query is embedded densely in every mode, sparse included, so that every hit carries
        its cosine similarity to the query (`Hit.cosine_similarity`).

        Raises:
            NotFound: the collection does not exist.
            InvalidArgument("mode"): the collection was not built for `mode`.
        """
        mode = self.resolve_mode(collection, mode)
        vector = self.embedder.embed([query])[0]
        sparse = self.sparse_embedder.embed_query(query) if mode != "dense" else None
        served = self._served_versions(collection, filter)

        def search(limit: int) -> list[Hit]:
            return self.store.search(collection, vector, limit, filter, min_score, sparse=sparse,
                                     mode=mode, fusion=fusion, prefetch_limit=PREFETCH_LIMIT,
                                     versions=served)

        return versions.search_current(search, self.store, collection, top_k)

    def _served_versions(self, collection: str, filter: Mapping[str, str] | None
                         ) -> list[str] | None:
        """With a title or source in `filter`, the head versions of the documents that have them
        (titles and sources are stored in heads only); else None (no restriction)."""
        if not filter or not {"title", "source"} & set(filter):
            return None
        found: list[str] = []
        offset: str | None = None
        while True:
            heads, offset = self.store.list_heads(collection, 1024, offset, filter=filter)
            found.extend(head.version for head in heads)
            if offset is None:
                return found

    def collections(self) -> list[CollectionInfo]:
        return self.store.list_collections()

    def get_document(self, collection: str, document_id: str) -> DocumentHead:
        """The served version of a document.

        Raises:
            NotFound: no such collection, or no such document in it.
        """
        head = self.store.heads(collection, [document_id]).get(document_id)
        if head is None:
            raise NotFound(f"document {document_id!r} does not exist in collection "
                           f"{collection!r}")
        if head.legacy:  # written before heads: count its chunks
            head = replace(head, chunk_count=self.store.point_counts(
                collection, [document_id]).get(document_id, 0))
        return head

    def list_documents(self, collection: str, page_size: int, offset: str | None
                       ) -> tuple[list[DocumentHead], str | None]:
        """Up to `page_size` documents (their heads) from store position `offset` (None: the
        first), and the position of the next page (None after the last). Documents written
        before heads existed are not listed. Raises NotFound for an unknown collection."""
        return self.store.list_heads(collection, page_size, offset)

    def delete_document(self, collection: str, document_id: str) -> None:
        """Deletes a document: its head and every version up to it, in one store delete (a write
        of it still in progress and newer than its head keeps its points, and serves once
        committed).

        Raises:
            NotFound: no such collection, or no such document in it.
        """
        head = self.get_document(collection, document_id)
        self.store.delete_versions(collection, document_id, head.seq)

    def delete_collection(self, collection: str) -> None:
        """Deletes a collection and every document in it. Raises NotFound when absent."""
        with self._create_lock:
            self.store.delete_collection(collection)
