"""Both store backends behave the same through the `VectorStore` interface; the embedded store also
survives reopening and a hard kill, and refuses a second owner of its directory."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from qdrant_client import QdrantClient

from libs.errors import FailedPrecondition, InvalidArgument, NotFound
from services.retrieval.edge_store import DataDirLocked, EdgeStore
from services.retrieval.server_store import ServerStore
from services.retrieval.store import ChunkRecord, point_id

DIM = 8
HALF_PRECISION = 1e-3
"""How far a stored vector's cosine may be from the float32 one: collections store dense vectors
as float16 (edge_store.DENSE_DATATYPE), whose spacing just below 1 is 2**-11."""

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


@pytest.fixture(scope="module")
def qdrant_server(tmp_path_factory):
    """A real Qdrant server on loopback, when a `qdrant` binary is installed (none of PyPI,
    Debian or npm ships one, so CI skips this; the in-process double covers the client code)."""
    binary = shutil.which("qdrant")
    if binary is None:
        pytest.skip("no qdrant server binary on PATH: PyPI, Debian and npm ship none")
    ports = []
    for _ in range(2):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    storage = tmp_path_factory.mktemp("qdrant")
    env = {**os.environ, "QDRANT__SERVICE__HOST": "127.0.0.1",
           "QDRANT__SERVICE__HTTP_PORT": str(ports[0]), "QDRANT__SERVICE__GRPC_PORT": str(ports[1]),
           "QDRANT__STORAGE__STORAGE_PATH": str(storage / "storage"),
           "QDRANT__TELEMETRY_DISABLED": "true"}
    server = subprocess.Popen([binary], env=env, cwd=storage, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{ports[0]}"
    try:
        for _ in range(300):
            try:
                QdrantClient(url=url, timeout=1).get_collections()
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        else:
            pytest.fail("the qdrant server did not answer within 30 s")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(params=["edge", "server", "qdrant-server"])
def store(request, tmp_path):
    if request.param == "edge":
        backend = EdgeStore(tmp_path / "store")
    elif request.param == "server":
        backend = ServerStore(QdrantClient(":memory:"))
    else:
        client = QdrantClient(url=request.getfixturevalue("qdrant_server"))
        for collection in client.get_collections().collections:
            client.delete_collection(collection.name)
        backend = ServerStore(client)
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
    assert hits[0].score == pytest.approx(float(unit(1, 0.1) @ unit(1, 0)), abs=HALF_PRECISION)
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


def test_new_collections_store_half_precision_and_old_ones_keep_float32(tmp_path):
    import qdrant_edge as qe

    from services.retrieval.store import DENSE_VECTOR, SPARSE_VECTOR

    # A hybrid shard as the previous version made it: float32 dense vectors.
    shard = qe.EdgeShard.create(str(tmp_path / "collections" / "old"), qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)}))
    shard.update(qe.UpdateOperation.upsert_points(
        [qe.Point(point_id("old", "a", 0), {DENSE_VECTOR: unit(1, 0).tolist()},
                  chunk("a", 0).payload())]))
    shard.close()
    for reopen in range(2):
        store = EdgeStore(tmp_path)
        try:
            if not reopen:
                store.ensure_collection("new", DIM)
                put(store, "new", [(chunk("a", 0), unit(1, 0))])
            query = unit(1, 0.1)
            exact = float(query @ unit(1, 0))
            old, new = (store.search(name, query, top_k=1)[0].score for name in ("old", "new"))
            assert old == pytest.approx(exact, abs=1e-6)
            assert new == pytest.approx(exact, abs=HALF_PRECISION) and new != pytest.approx(
                exact, abs=1e-6)  # rounded: the stored vector is float16
        finally:
            store.close()
    config = json.loads((tmp_path / "collections" / "new" / "edge_config.json").read_text())
    assert config["vectors"][DENSE_VECTOR]["datatype"] == "float16"


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


# --- sparse (BM25) and hybrid search, on both backends -------------------------------------------

TEXTS = {
    "vit": "Vitamin D supplements reduce the risk of hip fractures in older women.",
    "zeb": "Zebrafish regenerate heart muscle after injury through cardiomyocyte division.",
    "cat": "Domestic cats purr at frequencies that may promote bone healing.",
}


@pytest.fixture
def texts_store(store):
    from services.retrieval.retriever import Bm25Embedder

    bm25 = Bm25Embedder()
    store.ensure_collection("papers", DIM)
    records = [ChunkRecord(doc, 0, text, "", "pubmed" if doc != "cat" else "blog", 0, len(text),
                           fingerprint=f"fp-{doc}")
               for doc, text in TEXTS.items()]
    # Dense vectors that disagree with the words: "cat" is nearest the dense query below.
    vectors = np.stack([unit(0, 1), unit(0, 0, 1), unit(1, 0)])
    store.upsert("papers", records, vectors, bm25.embed_documents([r.text for r in records]))
    return store, bm25


def test_sparse_search_ranks_by_words(texts_store):
    store, bm25 = texts_store
    hits = store.search("papers", None, top_k=3, mode="sparse",
                        sparse=bm25.embed_query("hip fracture vitamin"))
    assert [h.document_id for h in hits] == ["vit"]  # only the chunk sharing a term matches
    assert hits[0].score > 0
    assert store.search("papers", None, top_k=3, mode="sparse",
                        sparse=bm25.embed_query("the of and")) == []  # stopwords only


@pytest.mark.parametrize("fusion", ["dbsf", "rrf"])
def test_hybrid_fuses_dense_and_sparse(texts_store, fusion):
    store, bm25 = texts_store
    hits = store.search("papers", unit(1, 0), top_k=3, mode="hybrid", fusion=fusion,
                        sparse=bm25.embed_query("zebrafish heart regeneration"))
    ids = [h.document_id for h in hits]
    # Dense alone puts "cat" first and sparse alone finds only "zeb"; the fusion has both on top.
    assert set(ids[:2]) == {"cat", "zeb"}
    assert store.search("papers", unit(1, 0), top_k=3)[0].document_id == "cat"


def test_filter_and_min_score_apply_to_every_mode(texts_store):
    store, bm25 = texts_store
    query = bm25.embed_query("cats bone healing zebrafish heart")
    for mode in ("dense", "sparse", "hybrid"):
        hits = store.search("papers", unit(1, 0), top_k=3, mode=mode, sparse=query,
                            filter={"source": "pubmed"})
        assert hits and {h.document_id for h in hits} <= {"vit", "zeb"}, mode
        every = store.search("papers", unit(1, 0), top_k=3, mode=mode, sparse=query)
        cut = (every[0].score + every[-1].score) / 2 if len(every) > 1 else every[0].score
        kept = store.search("papers", unit(1, 0), top_k=3, mode=mode, sparse=query,
                            min_score=cut)
        assert kept and all(h.score >= cut for h in kept), mode
        assert len(kept) < len(every) or len(every) == 1, mode


def test_every_mode_reports_each_hits_cosine_to_the_query(texts_store):
    store, bm25 = texts_store
    query = unit(1, 0.5, 0.25)
    stored = {"vit": unit(0, 1), "zeb": unit(0, 0, 1), "cat": unit(1, 0)}
    for mode in ("dense", "sparse", "hybrid"):
        hits = store.search("papers", query, top_k=3, mode=mode,
                            sparse=bm25.embed_query("cats bone healing zebrafish heart"))
        assert hits, mode
        for hit in hits:
            exact = float(query @ stored[hit.document_id])
            assert hit.cosine_similarity == pytest.approx(exact, abs=HALF_PRECISION), (
                mode, hit.document_id)
        if mode == "dense":
            assert [h.cosine_similarity for h in hits] == [h.score for h in hits]
    # Without a dense query vector (sparse search as the store allows it) there is no cosine.
    hits = store.search("papers", None, top_k=3, mode="sparse",
                        sparse=bm25.embed_query("zebrafish heart"))
    assert [(h.document_id, h.cosine_similarity) for h in hits] == [("zeb", None)]


def test_a_hit_deleted_before_its_cosine_is_read_has_none(tmp_path):
    import qdrant_edge as qe

    from services.retrieval.edge_store import _stored_cosines
    from services.retrieval.store import DENSE_VECTOR

    store = EdgeStore(tmp_path)
    try:
        store.ensure_collection("papers", DIM)
        put(store, "papers", [(chunk("a", 0), unit(1, 0)), (chunk("b", 0), unit(0, 1))])
        shard, query = store._shard("papers"), unit(1, 1)
        points = shard.query(qe.QueryRequest(
            limit=2, query=qe.Query.Nearest(query.tolist(), using=DENSE_VECTOR), with_payload=True))
        store.delete_document("papers", points[1].payload["document_id"])  # a re-ingest's delete
        cosines = _stored_cosines(shard, query, points)
        assert cosines[0] == pytest.approx(float(query @ unit(1, 0)), abs=HALF_PRECISION)
        assert cosines[1] is None
    finally:
        store.close()


def test_fingerprints_of_stored_documents(texts_store):
    store, _ = texts_store
    assert store.fingerprints("papers", ["vit", "zeb", "nope"]) == {"vit": "fp-vit",
                                                                   "zeb": "fp-zeb"}
    assert store.modes("papers") == {"dense", "sparse", "hybrid"}


def test_old_dense_only_collection_refuses_sparse_modes(tmp_path):
    import qdrant_edge as qe

    # A shard as the previous version made it: one unnamed dense vector.
    shard = qe.EdgeShard.create(str(tmp_path / "collections" / "old"), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=DIM, distance=qe.Distance.Cosine)))
    shard.update(qe.UpdateOperation.upsert_points(
        [qe.Point(point_id("old", "a", 0), unit(1).tolist(), chunk("a", 0).payload())]))
    shard.close()
    store = EdgeStore(tmp_path)
    try:
        assert store.modes("old") == {"dense"}
        assert store.search("old", unit(1), top_k=1)[0].document_id == "a"
        store.upsert("old", [chunk("b", 0)], unit(0, 1)[None, :])
        assert store.count("old") == 2
        with pytest.raises(InvalidArgument) as error:
            store.search("old", unit(1), top_k=1, mode="hybrid")
        assert error.value.field == "mode"
    finally:
        store.close()


def test_kill_during_an_ingest_leaves_whole_batches(tmp_path):
    # A child process writes 40 batches of 50 chunks (dense + BM25) and says after each one that it
    # is stored; it is killed with SIGKILL while it is still writing.
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from services.retrieval.edge_store import EdgeStore
        from services.retrieval.retriever import Bm25Embedder
        from services.retrieval.store import ChunkRecord
        store = EdgeStore({str(tmp_path)!r})
        store.ensure_collection("papers", {DIM})
        bm25 = Bm25Embedder()
        rng = np.random.default_rng(0)
        for batch in range(40):
            records = [ChunkRecord(f"{{batch}}-{{i}}", 0, f"batch {{batch}} note {{i}} about cells",
                                   "", "s", 0, 30) for i in range(50)]
            vectors = rng.normal(size=(50, {DIM})).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            sparse = bm25.embed_documents([r.text for r in records])
            store.upsert("papers", records, vectors, sparse)
            print(batch, flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        acknowledged = -1
        while acknowledged < 5:
            line = child.stdout.readline()
            assert line, "the child ended before writing six batches"
            acknowledged = int(line)
        child.kill()
    finally:
        child.wait(timeout=60)
        child.stdout.close()
    assert child.returncode == -9
    store = EdgeStore(tmp_path)
    try:
        count = store.count("papers")
        # Every acknowledged batch is there; the one in flight is there whole or not at all.
        assert count % 50 == 0 and count >= (acknowledged + 1) * 50
        batches = count // 50
        from services.retrieval.retriever import Bm25Embedder

        hits = store.search("papers", None, top_k=100, mode="sparse",
                            sparse=Bm25Embedder().embed_query(f"batch {batches - 1}"))
        assert {h.document_id.split("-")[0] for h in hits} >= {str(batches - 1)}
        assert store.fingerprints("papers", [f"{batches - 1}-49", f"{batches}-0"]).keys() == {
            f"{batches - 1}-49"}
    finally:
        store.close()


def test_a_second_process_on_the_same_directory_gets_a_clear_error(tmp_path):
    store = EdgeStore(tmp_path)
    try:
        script = textwrap.dedent(f"""
            from services.retrieval.edge_store import DataDirLocked, EdgeStore
            try:
                EdgeStore({str(tmp_path)!r})
            except DataDirLocked as error:
                print(error.message)
        """)
        child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=120)
        assert child.returncode == 0, child.stderr
        assert f"in use by another process (pid {os.getpid()})" in child.stdout
    finally:
        store.close()
