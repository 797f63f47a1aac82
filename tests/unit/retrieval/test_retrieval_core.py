"""The retrieval core over the embedded store with a bag-of-words embedder whose answers are
obvious, and the ranking metrics against hand-computed values."""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass

import numpy as np
import pytest

from libs.errors import DeadlineExceeded, InvalidArgument, NotFound
from services.retrieval.edge_store import EdgeStore
from services.retrieval.ir_metrics import mean_over_queries, ndcg_at_k, recall_at_k
from services.retrieval.retriever import Retriever


class BagOfWords:
    """Each lowercase word adds 1 to a hashed component; rows are L2-normalised."""

    dim = 64
    name = "bag-of-words"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                vectors[row, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)


@dataclass
class Doc:
    id: str
    text: str
    title: str = ""
    source: str = "test"


@pytest.fixture
def retriever(tmp_path):
    store = EdgeStore(tmp_path)
    yield Retriever(store, BagOfWords(), chunk_size=60, chunk_overlap=10)
    store.close()


def test_ingest_chunks_embeds_with_title_and_finds_the_document(retriever):
    docs = [
        Doc("aspirin", "Aspirin lowers stroke risk in adults. It thins the blood.",
            title="Aspirin"),
        Doc("vitd", "Vitamin D supplements do not prevent bone fractures in older people."),
        Doc("long", "Zebrafish regenerate heart tissue. " * 5),
    ]
    result = retriever.ingest("papers", docs)
    assert result.document_count == 3
    assert result.chunk_count == retriever.store.count("papers") > 3
    assert retriever.embedder.calls[0][0].startswith("Aspirin Aspirin lowers")
    (hit,) = retriever.search("papers", "vitamin d fractures", top_k=1)
    assert hit.document_id == "vitd"
    assert docs[1].text[hit.start_offset:hit.end_offset] == hit.text
    zebra = retriever.search("papers", "zebrafish heart", top_k=10, filter={"document_id": "long"})
    expected = retriever.chunks_of(docs[2])
    assert len(expected) > 1
    assert sorted(h.chunk_index for h in zebra) == [c.chunk_index for c in expected]


def test_reingest_replaces_old_chunks(retriever):
    retriever.ingest("papers", [Doc("x", "Cats purr loudly. " * 10), Doc("y", "Dogs bark.")])
    assert retriever.store.count("papers") > 2
    retriever.ingest("papers", [Doc("x", "Parrots talk.")])
    hits = retriever.search("papers", "cats purr", top_k=10)
    assert sorted((h.document_id, h.text) for h in hits) == [("x", "Parrots talk."),
                                                             ("y", "Dogs bark.")]


def test_unchanged_documents_are_skipped_and_changed_ones_updated(retriever):
    docs = [Doc("x", "Cats purr loudly."), Doc("y", "Dogs bark."), Doc("z", "Owls hoot.")]
    first = retriever.ingest("papers", docs)
    assert (first.document_count, first.skipped_count, first.updated_count) == (3, 0, 0)
    embedded = sum(len(call) for call in retriever.embedder.calls)
    again = retriever.ingest("papers", [Doc("x", "Cats purr loudly."), Doc("y", "Dogs growl."),
                                        Doc("w", "Bees buzz.")])
    assert (again.document_count, again.skipped_count) == (2, 1)
    assert again.updated_ids == ("y",)
    # Only the changed and the new document were embedded again.
    assert sum(len(call) for call in retriever.embedder.calls) - embedded == 2
    assert [h.text for h in retriever.search("papers", "dogs", top_k=10,
                                             filter={"document_id": "y"})] == ["Dogs growl."]
    # A changed title or source is a change too.
    assert retriever.ingest("papers", [Doc("z", "Owls hoot.", title="Birds")]).updated_count == 1


def test_a_stopped_ingest_writes_nothing(retriever):
    checks = []

    def stop_after_first_slice() -> bool:
        checks.append(1)
        return len(checks) > 1

    docs = [Doc(str(i), f"Document number {i} about topic {i % 7}.") for i in range(300)]
    with pytest.raises(DeadlineExceeded):
        retriever.ingest("papers", docs, should_stop=stop_after_first_slice)
    assert len(retriever.embedder.calls) == 1  # stopped after one slice of embedding
    with pytest.raises(NotFound):  # not even the collection was created
        retriever.store.count("papers")
    retriever.ingest("papers", docs[:5], should_stop=lambda: False)
    with pytest.raises(DeadlineExceeded):
        retriever.ingest("papers", docs, should_stop=lambda: True)
    assert retriever.store.count("papers") == 5


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid", None])
def test_every_mode_finds_the_document(retriever, mode):
    retriever.ingest("papers", [
        Doc("aspirin", "Aspirin lowers stroke risk in adults."),
        Doc("vitd", "Vitamin D supplements do not prevent bone fractures."),
        Doc("zebra", "Zebrafish regenerate heart tissue."),
    ])
    for fusion in ("dbsf", "rrf"):
        hits = retriever.search("papers", "vitamin fractures", top_k=3, mode=mode, fusion=fusion)
        assert hits[0].document_id == "vitd", (mode, fusion)


def test_a_mode_the_collection_lacks_is_invalid_argument(tmp_path):
    import qdrant_edge as qe

    qe.EdgeShard.create(str(tmp_path / "collections" / "old"), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=BagOfWords.dim, distance=qe.Distance.Cosine))).close()
    store = EdgeStore(tmp_path)
    try:
        retriever = Retriever(store, BagOfWords(), chunk_size=60, chunk_overlap=10)
        retriever.ingest("old", [Doc("a", "Aspirin lowers stroke risk.")])
        assert retriever.search("old", "aspirin", top_k=1, mode=None)[0].document_id == "a"
        with pytest.raises(InvalidArgument) as error:
            retriever.search("old", "aspirin", top_k=1, mode="sparse")
        assert error.value.field == "mode"
    finally:
        store.close()


def test_search_of_unknown_collection_is_not_found(retriever):
    with pytest.raises(NotFound):
        retriever.search("absent", "anything", top_k=3)


def test_collections_lists_sizes(retriever):
    retriever.ingest("a", [Doc("1", "one")])
    retriever.ingest("b", [Doc("1", "one"), Doc("2", "two")])
    assert [(c.name, c.chunk_count) for c in retriever.collections()] == [("a", 1), ("b", 2)]


def test_ndcg_matches_hand_computation():
    judgements = {"d1": 1, "d2": 1, "d9": 0}
    # Relevant at ranks 2 and 4; ideal puts both relevant documents at ranks 1 and 2.
    ranking = ["x", "d1", "d9", "d2", "y"]
    dcg = 1 / math.log2(3) + 1 / math.log2(5)
    idcg = 1 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at_k(ranking, judgements, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at_k(ranking, judgements, 3) == pytest.approx((1 / math.log2(3)) / idcg)
    assert ndcg_at_k(["d2", "d1"], judgements, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x"], judgements, 10) == 0.0


def test_recall_and_mean_over_judged_queries():
    qrels = {"q1": {"d1": 1, "d2": 1}, "q2": {"d3": 1}, "q3": {"d4": 0}}
    rankings = {"q1": ["d1", "x", "d2"], "q2": ["x", "y"]}
    assert recall_at_k(rankings["q1"], qrels["q1"], 2) == 0.5
    assert recall_at_k(rankings["q1"], qrels["q1"], 3) == 1.0
    # q3 has no relevant document and is left out, as trec_eval and BEIR do.
    assert mean_over_queries(recall_at_k, rankings, qrels, 3) == pytest.approx(0.5)
    assert mean_over_queries(ndcg_at_k, rankings, qrels, 10) == pytest.approx(
        (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3)) / 2)
