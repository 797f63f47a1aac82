"""The retrieval core: chunk, embed and store documents; embed a query and search a collection.

No gRPC here: the servicer validates requests and converts messages. Each chunk is embedded as
`(title + " " + chunk text).strip()`, the way BEIR and MTEB embed a titled passage for
sentence-transformers models, both densely (the sentence embedder) and as a BM25 sparse vector
(the engine's `Bm25` embedder: term frequencies with k1 1.2, b 0.75, English stemming and
stopwords; the store applies IDF); the stored text is the chunk alone.

An ingest first reads the fingerprint stored with each document's first chunk and skips documents
whose fingerprint is unchanged; it embeds the rest, checking between embedding batches whether the
caller still waits (`should_stop`), and only then writes: a cancelled or expired ingest writes
nothing.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import qdrant_edge as qe

from libs.errors import DeadlineExceeded, NotFound
from services.retrieval.chunking import chunk_text
from services.retrieval.store import (
    DENSE_ONLY,
    ChunkRecord,
    CollectionInfo,
    FusionMethod,
    Hit,
    SearchMode,
    SparseVector,
    VectorStore,
)

UPSERT_BATCH = 1024
"""Points per store write."""
EMBED_SLICE = 128
"""Chunks embedded between two checks that the caller still waits."""
PREFETCH_LIMIT = 100
"""Chunks each ranking of a hybrid search contributes to the fusion."""


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


class Retriever:
    """Ingest and dense / sparse / hybrid search over a `VectorStore`. Thread-safe; writes are
    applied one ingest at a time so that two re-ingests of one document never interleave their
    delete and upsert."""

    def __init__(self, store: VectorStore, embedder: TextEmbedder, chunk_size: int,
                 chunk_overlap: int, sparse_embedder: Bm25Embedder | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.sparse_embedder = sparse_embedder or Bm25Embedder()
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self._write_lock = threading.Lock()

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
        stored with the same fingerprint is skipped; one stored with another has its old chunks
        replaced.

        All embedding happens before the first write, so a failure there writes nothing, and so
        does `should_stop()` turning true before the write (checked every EMBED_SLICE chunks).
        Raises:
            InvalidArgument("collection"): an invalid collection name.
            FailedPrecondition: the collection holds vectors of another size.
            Stopped: `should_stop()` turned true; nothing was written.
        """
        should_stop = should_stop or (lambda: False)
        fingerprints = {document.id: self.fingerprint(document) for document in documents}
        try:
            dense_only = self.store.modes(collection) == DENSE_ONLY
            stored = self.store.fingerprints(collection, [document.id for document in documents])
        except NotFound:  # created below, right before the first write
            dense_only, stored = False, {}
        changed = [d for d in documents if stored.get(d.id) != fingerprints[d.id]]
        updated = tuple(d.id for d in changed if d.id in stored)
        records = [record for document in changed
                   for record in self.chunks_of(document, fingerprints[document.id])]
        texts = [f"{r.title} {r.text}".strip() for r in records]
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
        if should_stop():
            raise Stopped("ingest stopped before writing: the caller cancelled or its deadline "
                          "passed; nothing was written")
        with self._write_lock:
            self.store.ensure_collection(collection, self.embedder.dim)
            for document_id in updated:
                self.store.delete_document(collection, document_id)
            for begin in range(0, len(records), UPSERT_BATCH):
                end = begin + UPSERT_BATCH
                self.store.upsert(collection, records[begin:end], vectors[begin:end],
                                  None if dense_only else sparse[begin:end])
        return IngestResult(document_count=len(changed), chunk_count=len(records),
                            skipped_count=len(documents) - len(changed), updated_ids=updated)

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
        return self.store.search(collection, vector, top_k, filter, min_score, sparse=sparse,
                                 mode=mode, fusion=fusion, prefetch_limit=PREFETCH_LIMIT)

    def collections(self) -> list[CollectionInfo]:
        return self.store.list_collections()
