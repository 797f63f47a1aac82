"""The retrieval core: chunk, embed and store documents; embed a query and search a collection.

No gRPC here: the servicer validates requests and converts messages. Each chunk is embedded as
`(title + " " + chunk text).strip()`, the way BEIR and MTEB embed a titled passage for
sentence-transformers models; the stored text is the chunk alone.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.retrieval.chunking import chunk_text
from services.retrieval.store import ChunkRecord, CollectionInfo, Hit, VectorStore

UPSERT_BATCH = 1024
"""Points per store write."""


class DocumentFields(Protocol):
    """What ingest reads from a document (`mesh.common.v1.Document` has these fields)."""

    id: str
    title: str
    text: str
    source: str


class TextEmbedder(Protocol):
    """`embed(texts)` returns float32 [len(texts), dim] unit vectors."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True)
class IngestResult:
    document_count: int
    chunk_count: int


class Retriever:
    """Ingest and dense search over a `VectorStore`. Thread-safe; ingests are applied one at a time
    so that two re-ingests of one document never interleave their delete and upsert."""

    def __init__(self, store: VectorStore, embedder: TextEmbedder, chunk_size: int,
                 chunk_overlap: int) -> None:
        self.store = store
        self.embedder = embedder
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self._write_lock = threading.Lock()

    def chunks_of(self, document: DocumentFields) -> list[ChunkRecord]:
        """The chunks a document is stored as (none for blank text)."""
        return [
            ChunkRecord(document_id=document.id, chunk_index=chunk.index, text=chunk.text,
                        title=document.title, source=document.source,
                        start_offset=chunk.start, end_offset=chunk.end)
            for chunk in chunk_text(document.text, self.chunk_size, self.chunk_overlap)
        ]

    def ingest(self, collection: str, documents: Sequence[DocumentFields]) -> IngestResult:
        """Chunks, embeds and stores `documents` in `collection` (created if absent), replacing
        every chunk previously stored for their ids.

        All embedding happens before the first write, so a failure there writes nothing.
        Raises:
            InvalidArgument("collection"): an invalid collection name.
            FailedPrecondition: the collection holds vectors of another size.
        """
        records = [record for document in documents for record in self.chunks_of(document)]
        vectors = self.embedder.embed([f"{r.title} {r.text}".strip() for r in records])
        self.store.ensure_collection(collection, self.embedder.dim)
        with self._write_lock:
            for document in documents:
                self.store.delete_document(collection, document.id)
            for begin in range(0, len(records), UPSERT_BATCH):
                end = begin + UPSERT_BATCH
                self.store.upsert(collection, records[begin:end], vectors[begin:end])
        return IngestResult(document_count=len(documents), chunk_count=len(records))

    def search(self, collection: str, query: str, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None) -> list[Hit]:
        """The `top_k` chunks of `collection` most similar to `query`, best first.

        Raises:
            NotFound: the collection does not exist.
        """
        vector = self.embedder.embed([query])[0]
        return self.store.search(collection, vector, top_k, filter, min_score)

    def collections(self) -> list[CollectionInfo]:
        return self.store.list_collections()
