"""How a document's versions are written, found whole, served and removed: the head protocol.

Every write of a document is a new version: a write id (`version`, a random UUID) and a write
order (`seq`, microseconds since the epoch, at least one more than any point the documents
already have). A write

1. stores the version's chunks under point ids that include the version, each carrying the
   version, its seq and the version's chunk count (old versions stay untouched and served);
2. commits: writes each document's head (one point per document: the version, seq, chunk count,
   fingerprint, title and source) after the chunks, in the same conditional upsert as the last
   batch of chunks (one write-ahead-log record), which replaces only a head of a lower seq, so a
   head only moves forward and always names a version whose chunks are all stored;
3. reads the heads back and, where a document holds more points than its head's chunks and the
   head, removes every point that is neither the head's version nor newer than the head (older
   versions, a write that lost to a newer one, chunks of a write that died before its commit,
   chunks written before versions existed).

A crash anywhere leaves the previous version served whole (before 2) or the new one (after 2),
plus points no search returns (searches keep only chunks of their document's head version,
`current_hits`); the next write of the document, or a retry that finds the version whole and
unchanged, removes them. Two writers of one document end with the head of the higher seq and only
its chunks: the other's commit is refused or replaced, and whichever cleans up last removes the
loser's chunks (a cleanup never removes points newer than the head it read).

Ingest skips a document only when its head has the same fingerprint and the store holds exactly
`chunk_count` chunks of the head's version (`whole_versions`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from services.retrieval.store import (
    ChunkRecord,
    DocumentHead,
    Hit,
    SparseVector,
    VectorStore,
)

UPSERT_BATCH = 1024
"""Points per store write."""
MAX_SEARCH_ROUNDS = 4
"""Searches a query makes at most when stale chunks (of versions no longer served) crowd out its
top k: each round asks for four times as many."""


def whole_versions(store: VectorStore, collection: str, heads: Mapping[str, DocumentHead],
                   fingerprints: Mapping[str, str]) -> set[str]:
    """Ids of documents whose head has their fingerprint and whose head version is stored whole
    (exactly `chunk_count` chunks): the ones an ingest may skip. Removes the stale points of those
    documents (left by a write that died between its commit and its cleanup)."""
    candidates = {doc: head for doc, head in heads.items()
                  if not head.legacy and head.fingerprint == fingerprints.get(doc)}
    counts = store.version_counts(collection, [head.version for head in candidates.values()])
    whole = {doc for doc, head in candidates.items()
             if counts.get(head.version, 0) == head.chunk_count}
    points = store.point_counts(collection, sorted(whole))
    stale = [heads[doc] for doc in sorted(whole)
             if points.get(doc, 0) != heads[doc].chunk_count + 1]
    if stale:
        store.remove_stale(collection, stale)
    return whole


def next_seq(store: VectorStore, collection: str, document_ids: Sequence[str]) -> int:
    """The seq of a new write of `document_ids`: now in microseconds, and more than any seq their
    points have (a clock that went back never orders a write before an earlier one)."""
    return max(time.time_ns() // 1000, store.max_seq(collection, document_ids) + 1)


def write_versions(store: VectorStore, collection: str, records: Sequence[ChunkRecord],
                   vectors: np.ndarray, sparse: Sequence[SparseVector] | None,
                   heads: Sequence[DocumentHead]) -> list[DocumentHead]:
    """Writes one new version of each document of `heads` (their version, seq and chunk_count
    already set; `records` are their chunks in order, with `vectors` and `sparse` rows), commits
    the heads and removes what they made stale. Returns the heads served afterwards (another
    writer's, where a newer one won)."""
    last = max(0, (len(records) - 1) // UPSERT_BATCH * UPSERT_BATCH)
    for begin in range(0, last + 1, UPSERT_BATCH):
        end = begin + UPSERT_BATCH
        store.upsert(collection, records[begin:end], vectors[begin:end],
                     None if sparse is None else sparse[begin:end],
                     heads=heads if begin == last else ())  # the last batch commits
    current = store.heads(collection, [head.document_id for head in heads])
    served = [head for head in current.values() if not head.legacy]
    points = store.point_counts(collection, [head.document_id for head in served])
    stale = [head for head in served if points.get(head.document_id, 0) != head.chunk_count + 1]
    if stale:  # a previous version, a lost race, an interrupted write, or chunks before heads
        store.remove_stale(collection, stale)
    return list(current.values())


def new_heads(records_by_document: Mapping[str, list[ChunkRecord]],
              fingerprints: Mapping[str, str], titles: Mapping[str, str],
              sources: Mapping[str, str], seq: int
              ) -> tuple[list[ChunkRecord], list[DocumentHead]]:
    """Each document's chunks stamped with a new version (a random write id), `seq` and their
    count, in order, and the heads that commit them."""
    records: list[ChunkRecord] = []
    heads: list[DocumentHead] = []
    for doc, chunks in records_by_document.items():
        version = f"v{uuid.uuid4().hex}"  # not a UUID: engines may read a UUID string as one
        records.extend(replace(chunk, version=version, seq=seq, chunk_count=len(chunks),
                               title="", source="", fingerprint="") for chunk in chunks)
        heads.append(DocumentHead(doc, version, seq, len(chunks), fingerprints[doc],
                                  titles[doc], sources[doc]))
    return records, heads


def current_hits(hits: Sequence[Hit], heads: Mapping[str, DocumentHead]) -> list[Hit]:
    """The hits a search may return: chunks of their document's head version, with the head's
    title and source; chunks written before versions only while their document has no head."""
    kept = []
    for hit in hits:
        head = heads.get(hit.document_id)
        if not hit.version:
            if head is None or head.legacy:
                kept.append(hit)
        elif head is not None and head.version == hit.version:
            kept.append(hit.with_head(head.title, head.source))
    return kept


def search_current(search: Callable[[int], list[Hit]], store: VectorStore, collection: str,
                   top_k: int) -> list[Hit]:
    """The `top_k` best current hits: `search(limit)` returns the best `limit` chunks; while stale
    ones crowd current ones out of the first `limit`, asks again for four times as many (up to
    MAX_SEARCH_ROUNDS rounds)."""
    limit = top_k
    kept: list[Hit] = []
    for _ in range(MAX_SEARCH_ROUNDS):
        hits = search(limit)
        documents = sorted({hit.document_id for hit in hits})
        kept = current_hits(hits, store.heads(collection, documents, served_only=True)
                            if documents else {})
        if len(kept) >= top_k or len(hits) < limit:
            break
        limit *= 4
    return kept[:top_k]
