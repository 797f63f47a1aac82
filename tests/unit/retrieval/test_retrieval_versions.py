"""The head protocol of ingest (services/retrieval/versions.py) on both stores: a write that stops
at any point leaves one whole version served and its retry converges to exactly the new one; the
skip decision checks that the stored version is whole; two writers of one document, in any
interleaving, end with one whole version; searches never return chunks of another version."""

from __future__ import annotations

import itertools
import random
import re
import threading
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from qdrant_client import QdrantClient

from services.retrieval.edge_store import EdgeStore
from services.retrieval.faults import KillAfterWrites
from services.retrieval.retriever import Retriever
from services.retrieval.server_store import ServerStore

pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")

COLLECTION = "papers"


@dataclass
class Doc:
    id: str
    text: str
    title: str = ""
    source: str = "test"


class BagOfWords:
    """Each lowercase word adds 1 to a hashed component; rows are L2-normalised."""

    dim = 64
    name = "bag-of-words"

    def embed(self, texts):
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                vectors[row, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)


class Crash(BaseException):
    """What the fault store raises instead of killing the test process."""


def crash() -> None:
    raise Crash


def make_store(kind: str, path):
    return EdgeStore(path) if kind == "edge" else ServerStore(QdrantClient(":memory:"))


@pytest.fixture(params=["edge", "server"])
def store(request, tmp_path):
    backend = make_store(request.param, tmp_path / "store")
    yield backend
    backend.close()


def retriever_over(store) -> Retriever:
    return Retriever(store, BagOfWords(), chunk_size=40, chunk_overlap=0)


def version_of(round_: int, doc: str, sentences: int = 6) -> Doc:
    """Document `doc` as written in round `round_`: several chunks, every chunk's text unique to
    the round (so a chunk of another version is told apart)."""
    text = " ".join(f"Round{round_} {doc} says fact{i}." for i in range(sentences + round_))
    return Doc(doc, text, title=f"{doc} title r{round_}", source=f"src-{round_}")


def served(retriever: Retriever, doc: str) -> list[str]:
    """Texts of `doc`'s chunks that a search returns, in chunk order."""
    hits = retriever.search(COLLECTION, f"{doc} says fact", top_k=100,
                            filter={"document_id": doc}, mode="dense")
    return [hit.text for hit in sorted(hits, key=lambda hit: hit.chunk_index)]


def expected(retriever: Retriever, document: Doc) -> list[str]:
    return [chunk.text for chunk in retriever.chunks_of(document)]


def assert_exactly(retriever: Retriever, document: Doc) -> None:
    """The store holds exactly `document`'s version: its head, all its chunks, nothing else."""
    store = retriever.store
    head = retriever.get_document(COLLECTION, document.id)
    assert head.fingerprint == retriever.fingerprint(document)
    assert (head.title, head.source) == (document.title, document.source)
    chunks = expected(retriever, document)
    assert head.chunk_count == len(chunks)
    assert store.version_counts(COLLECTION, [head.version]) == {head.version: len(chunks)}
    assert store.point_counts(COLLECTION, [document.id]) == {document.id: len(chunks) + 1}
    assert served(retriever, document.id) == chunks


def test_every_stop_of_a_write_leaves_one_whole_version_and_a_retry_converges(store):
    retriever = retriever_over(store)
    old = [version_of(0, "a"), version_of(0, "b")]
    retriever.ingest(COLLECTION, old)
    new = [version_of(1, "a"), version_of(1, "b", sentences=2)]
    units = sum(len(expected(retriever, d)) for d in new) + len(new) + 1  # chunks, heads, delete
    for budget in range(units):
        for document in old:  # back to the old version, written whole
            retriever.ingest(COLLECTION, [document])
        faulty = Retriever(KillAfterWrites(store, budget, crash), retriever.embedder,
                           retriever.chunk_size, retriever.chunk_overlap)
        with pytest.raises(Crash):
            faulty.ingest(COLLECTION, new)
        for before, after in zip(old, new, strict=True):
            # Whatever was written, a search serves one version whole: the old or the new.
            assert served(retriever, before.id) in (expected(retriever, before),
                                                    expected(retriever, after)), budget
        result = retriever.ingest(COLLECTION, new)  # the retry
        assert result.document_count + result.skipped_count == 2
        for document in new:
            assert_exactly(retriever, document)
    # With budget enough, nothing stops it.
    retriever.ingest(COLLECTION, old)
    Retriever(KillAfterWrites(store, units, crash), retriever.embedder, 40, 0).ingest(
        COLLECTION, new)
    for document in new:
        assert_exactly(retriever, document)


def test_a_version_missing_a_chunk_is_written_again_not_skipped(store):
    retriever = retriever_over(store)
    document = version_of(0, "a")
    retriever.ingest(COLLECTION, [document])
    head = retriever.get_document(COLLECTION, document.id)
    # Lose one chunk of the served version (as the old layout's crash between batches did).
    lost = [hit for hit in retriever.search(COLLECTION, "fact1", top_k=100, mode="sparse")
            if hit.chunk_index == 1]
    assert lost
    _delete_chunk(store, lost[0].chunk_id)
    assert store.version_counts(COLLECTION, [head.version]) == {
        head.version: head.chunk_count - 1}
    result = retriever.ingest(COLLECTION, [document])
    assert (result.document_count, result.skipped_count) == (1, 0)
    assert_exactly(retriever, document)
    again = retriever.ingest(COLLECTION, [document])  # now whole: skipped
    assert (again.document_count, again.skipped_count) == (0, 1)


def _delete_chunk(store, chunk_id: str) -> None:
    if isinstance(store, EdgeStore):
        import qdrant_edge as qe

        store._shard(COLLECTION).update(qe.UpdateOperation.delete_points([chunk_id]))
    else:
        from qdrant_client import models

        store._client.delete(COLLECTION, points_selector=models.PointIdsList(points=[chunk_id]))


def test_a_retry_of_a_write_stopped_after_its_commit_skips_and_removes_the_old_version(store):
    retriever = retriever_over(store)
    old, new = version_of(0, "a"), version_of(1, "a")
    retriever.ingest(COLLECTION, [old])
    chunks_and_head = len(expected(retriever, new)) + 1
    faulty = Retriever(KillAfterWrites(store, chunks_and_head, crash), retriever.embedder, 40, 0)
    with pytest.raises(Crash):  # stops at the cleanup: the old version is still stored
        faulty.ingest(COLLECTION, [new])
    assert store.point_counts(COLLECTION, ["a"])["a"] > chunks_and_head
    assert served(retriever, "a") == expected(retriever, new)
    result = retriever.ingest(COLLECTION, [new])
    assert (result.document_count, result.skipped_count) == (0, 1)
    assert_exactly(retriever, new)


class Turns:
    """Lets the threads named in `order` run their store calls one at a time, in that order."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.position = 0
        self.condition = threading.Condition()

    def run(self, name: str, call):
        with self.condition:
            if not self.condition.wait_for(
                    lambda: self.position >= len(self.order)
                    or self.order[self.position] == name, timeout=30):
                raise AssertionError(f"{name} waited for its turn at {self.position}")
            try:
                return call()
            finally:
                self.position += 1
                self.condition.notify_all()


GATED = ("heads", "version_counts", "point_counts", "max_seq", "upsert")
"""Store calls of an ingest of a changed document already stored, in this order: heads,
version_counts, point_counts (the skip check), then max_seq, upsert (the chunks and the head),
heads, point_counts (the write; then remove_stale, ungated, where points are stale)."""
CALLS_PER_WRITER = 7


class Gated:
    """A store whose GATED calls wait for `name`'s turn."""

    def __init__(self, store, turns: Turns, name: str) -> None:
        self._store, self._turns, self._name = store, turns, name

    def __getattr__(self, attribute: str):
        value = getattr(self._store, attribute)
        if attribute not in GATED:
            return value
        return lambda *args, **kwargs: self._turns.run(self._name,
                                                       lambda: value(*args, **kwargs))


def interleavings(count: int, seed: int = 0) -> list[str]:
    """`count` orders of two writers' calls, A's and B's 7 each: all A then all B, all B then A,
    strict alternation both ways, and a fixed random sample of the other 3,428."""
    n = CALLS_PER_WRITER
    every = ["".join("A" if i in chosen else "B" for i in range(2 * n))
             for chosen in map(set, itertools.combinations(range(2 * n), n))]
    fixed = ["A" * n + "B" * n, "B" * n + "A" * n, "AB" * n, "BA" * n]
    rest = [order for order in every if order not in fixed]
    return fixed + random.Random(seed).sample(rest, count - len(fixed))


def race(store, order: str) -> None:
    """Two writers of document "a" (stored at round 0) with their store calls in `order`; then
    checks that exactly the winner's version is stored."""
    base = retriever_over(store)
    base.ingest(COLLECTION, [version_of(0, "a")])
    turns = Turns(order)
    writers = {name: Retriever(Gated(store, turns, name), base.embedder, 40, 0) for name in "AB"}
    documents = {"A": version_of(1, "a"), "B": version_of(2, "a", sentences=3)}
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            writers[name].ingest(COLLECTION, [documents[name]])
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(name,)) for name in "AB"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, (order, errors)
    head = base.get_document(COLLECTION, "a")
    winner = next(d for d in documents.values() if base.fingerprint(d) == head.fingerprint)
    assert_exactly(base, winner)


@pytest.mark.parametrize("kind", ["edge", "server"])
def test_two_writers_of_one_document_end_with_one_whole_version(kind, tmp_path):
    for number, order in enumerate(interleavings(24)):
        store = make_store(kind, tmp_path / f"store-{number}")
        try:
            race(store, order)
        finally:
            store.close()


def test_a_qdrant_server_without_conditional_upserts_is_refused_before_any_write(monkeypatch):
    from qdrant_client.http import models

    from libs.errors import FailedPrecondition

    client = QdrantClient(":memory:")
    monkeypatch.setattr(client, "info", lambda: models.VersionInfo(
        title="qdrant - vector search engine", version="1.13.6"))
    retriever = retriever_over(ServerStore(client))
    with pytest.raises(FailedPrecondition, match="1.13.6; ingest needs 1.16 or later"):
        retriever.ingest(COLLECTION, [version_of(0, "a")])
    assert not client.collection_exists(COLLECTION)


def test_a_long_title_is_stored_once_and_embedded_at_most_512_characters_per_chunk(store):
    class Recording(BagOfWords):
        texts: list[str] = []

        def embed(self, texts):
            self.texts.extend(texts)
            return super().embed(texts)

    retriever = Retriever(store, Recording(), chunk_size=40, chunk_overlap=0)
    title = "T" * 1024
    document = Doc("a", "Round0 a says fact0. Round0 a says fact1. Round0 a says fact2.",
                   title=title)
    retriever.ingest(COLLECTION, [document])
    chunks = expected(retriever, document)
    assert len(chunks) > 1
    assert Recording.texts == [f"{title[:512]} {text}" for text in chunks]
    assert retriever.get_document(COLLECTION, "a").title == title
    hits = retriever.search(COLLECTION, "fact", top_k=10, filter={"title": title})
    assert {hit.title for hit in hits} == {title} and len(hits) == len(chunks)
    # The title is in the head only: of the stored points, one carries it.
    payloads = _payloads(store)
    assert len(payloads) == len(chunks) + 1
    assert [p.get("kind") for p in payloads if "title" in p] == ["document"]


def _payloads(store) -> list[dict]:
    if isinstance(store, EdgeStore):
        import qdrant_edge as qe

        records, _ = store._shard(COLLECTION).scroll(qe.ScrollRequest(limit=1000,
                                                                      with_payload=True))
    else:
        records, _ = store._client.scroll(COLLECTION, limit=1000, with_payload=True)
    return [dict(record.payload) for record in records]
