"""Both store backends behave the same through the `VectorStore` interface; the embedded store also
survives reopening and a hard kill, and refuses a second owner of its directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from qdrant_client import QdrantClient

from libs.errors import FailedPrecondition, InvalidArgument, NotFound
from services.retrieval.edge_store import DataDirLocked, EdgeStore
from services.retrieval.server_store import ServerStore
from services.retrieval.store import ChunkRecord, point_id

DIM = 8

# qdrant-client's in-memory double says it ignores payload indexes; the server uses them.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


def unit(*components: float) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(components)] = components
    return vector / np.linalg.norm(vector)


def chunk(document_id: str, index: int, source: str = "s", title: str = "t") -> ChunkRecord:
    text = f"{document_id} chunk {index}"
    return ChunkRecord(document_id, index, text, title, source, index * 10, index * 10 + len(text))


def put(store, collection: str, records_and_vectors) -> None:
    records = [r for r, _ in records_and_vectors]
    store.upsert(collection, records, np.stack([v for _, v in records_and_vectors]))


@pytest.fixture(params=["edge", "server"])
def store(request, tmp_path):
    backend = (EdgeStore(tmp_path / "store") if request.param == "edge"
               else ServerStore(QdrantClient(":memory:")))
    yield backend
    backend.close()


@pytest.fixture
def filled(store):
    store.ensure_collection("papers", DIM)
    put(store, "papers", [
        (chunk("a", 0, source="pubmed"), unit(1, 0)),
        (chunk("a", 1, source="pubmed"), unit(1, 1)),
        (chunk("b", 0, source="arxiv", title="Bee"), unit(0, 1)),
        (chunk("c", 0, source="arxiv"), unit(-1, 0)),
    ])
    return store


def test_search_ranks_by_cosine_and_returns_the_payload(filled):
    hits = filled.search("papers", unit(1, 0.1), top_k=3)
    assert [(h.document_id, h.chunk_index) for h in hits] == [("a", 0), ("a", 1), ("b", 0)]
    assert hits[0].score == pytest.approx(float(unit(1, 0.1) @ unit(1, 0)), abs=1e-5)
    assert hits[0].score > hits[1].score > hits[2].score
    first = hits[0]
    assert (first.text, first.title, first.source) == ("a chunk 0", "t", "pubmed")
    assert (first.start_offset, first.end_offset) == (0, len("a chunk 0"))
    assert first.chunk_id == point_id("papers", "a", 0)


def test_filter_keeps_only_matching_payload(filled):
    hits = filled.search("papers", unit(1, 0), top_k=10, filter={"source": "arxiv"})
    assert {h.document_id for h in hits} == {"b", "c"}
    hits = filled.search("papers", unit(1, 0), top_k=10, filter={"source": "arxiv", "title": "Bee"})
    assert [h.document_id for h in hits] == ["b"]
    assert filled.search("papers", unit(1, 0), top_k=10, filter={"document_id": "zzz"}) == []


def test_min_score_drops_dissimilar_chunks(filled):
    hits = filled.search("papers", unit(1, 0), top_k=10, min_score=0.5)
    assert [(h.document_id, h.chunk_index) for h in hits] == [("a", 0), ("a", 1)]
    assert all(h.score >= 0.5 for h in hits)
    hits = filled.search("papers", unit(1, 0), top_k=10, min_score=-0.5)
    assert [h.document_id for h in hits] == ["a", "a", "b"]  # c points the other way: -1


def test_reingest_replaces_a_documents_chunks(filled):
    filled.delete_document("papers", "a")
    put(filled, "papers", [(chunk("a", 0, source="new"), unit(0, 0, 1))])
    assert filled.count("papers") == 3
    hits = filled.search("papers", unit(1, 0), top_k=10, filter={"document_id": "a"})
    assert [(h.chunk_index, h.source) for h in hits] == [(0, "new")]
    filled.delete_document("papers", "never-stored")
    assert filled.count("papers") == 3


def test_same_ids_overwrite(filled):
    put(filled, "papers", [(chunk("b", 0, source="moved"), unit(0, 1))])
    assert filled.count("papers") == 4
    (hit,) = filled.search("papers", unit(0, 1), top_k=1)
    assert (hit.document_id, hit.source) == ("b", "moved")


def test_list_collections_with_sizes(filled):
    filled.ensure_collection("empty", DIM)
    filled.ensure_collection("papers", DIM)  # idempotent
    listed = [(c.name, c.dim, c.chunk_count) for c in filled.list_collections()]
    assert listed == [("empty", DIM, 0), ("papers", DIM, 4)]


def test_unknown_collection_is_not_found(store):
    with pytest.raises(NotFound):
        store.search("absent", unit(1), top_k=1)
    with pytest.raises(NotFound):
        store.upsert("absent", [chunk("a", 0)], unit(1)[None, :])
    with pytest.raises(NotFound):
        store.count("absent")


def test_bad_collection_name_and_dimension(store):
    with pytest.raises(InvalidArgument) as error:
        store.ensure_collection("../escape", DIM)
    assert error.value.field == "collection"
    store.ensure_collection("papers", DIM)
    with pytest.raises(FailedPrecondition):
        store.ensure_collection("papers", DIM + 1)


def test_edge_store_survives_reopen(tmp_path):
    store = EdgeStore(tmp_path)
    store.ensure_collection("papers", DIM)
    put(store, "papers", [(chunk("a", 0), unit(1, 0)), (chunk("b", 0), unit(0, 1))])
    store.close()
    reopened = EdgeStore(tmp_path)
    try:
        assert [(c.name, c.chunk_count) for c in reopened.list_collections()] == [("papers", 2)]
        assert reopened.search("papers", unit(0, 1), top_k=1)[0].document_id == "b"
        with pytest.raises(FailedPrecondition):
            reopened.ensure_collection("papers", DIM * 2)
    finally:
        reopened.close()


def test_edge_store_refuses_a_second_owner(tmp_path):
    store = EdgeStore(tmp_path)
    try:
        with pytest.raises(DataDirLocked) as error:
            EdgeStore(tmp_path)
        assert str(os.getpid()) in error.value.message
    finally:
        store.close()
    EdgeStore(tmp_path).close()  # free again once closed


def test_edge_store_survives_a_hard_kill(tmp_path):
    # A child process upserts, then dies by SIGKILL without flush or close.
    script = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from services.retrieval.edge_store import EdgeStore
        from services.retrieval.store import ChunkRecord
        store = EdgeStore({str(tmp_path)!r})
        store.ensure_collection("papers", {DIM})
        records = [ChunkRecord(str(i), 0, f"text {{i}}", "", "", 0, 6) for i in range(50)]
        vectors = np.eye({DIM}, dtype=np.float32)[np.arange(50) % {DIM}]
        store.upsert("papers", records, vectors)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == -9, child.stderr
    store = EdgeStore(tmp_path)  # the kernel released the dead process's lock
    try:
        assert store.count("papers") == 50
        hits = store.search("papers", unit(0, 0, 1), top_k=10, filter={"document_id": "2"})
        assert [h.text for h in hits] == ["text 2"]
    finally:
        store.close()
