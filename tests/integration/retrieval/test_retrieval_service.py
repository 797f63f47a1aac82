"""The retrieval service on a real grpc.aio server (port 0, a temporary data directory) with the
real all-MiniLM-L6-v2 embedder, loaded once for the module."""

from __future__ import annotations

import json

import grpc
import numpy as np
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.errors import status_from_rpc_error
from libs.server import Servicer, start_server
from services.retrieval.edge_store import DataDirLocked
from services.retrieval.embedder import Embedder, load_embedder
from services.retrieval.main import SERVICE_NAME, build_servicers, open_store
from services.retrieval.servicer import RetrievalServicer
from services.retrieval.settings import RetrievalSettings

# Test claims of SciFact with exactly one relevant abstract each: claim id -> abstract id; all in
# the subset the repository ships (data/scifact-demo, BEIR's layout and ids).
CLAIMS = {"1": "31715818", "3": "14717500", "5": "13734012", "13": "1606628"}


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The service's default encoder: the int8 ONNX export `make setup` made (torch without it)."""
    settings = RetrievalSettings()
    return load_embedder(settings.embedder, settings.onnx_path, 16, 2)


@pytest.fixture(scope="module")
def scifact(data_dir):
    root = data_dir / "scifact-demo"
    wanted = set(CLAIMS.values())
    abstracts = {}
    with (root / "corpus.jsonl").open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["_id"] in wanted:
                abstracts[record["_id"]] = record
    claims = {}
    with (root / "queries.jsonl").open() as lines:
        for line in lines:
            record = json.loads(line)
            if record["_id"] in CLAIMS:
                claims[record["_id"]] = record["text"]
    documents = [common_pb2.Document(id=a["_id"], title=a["title"], text=a["text"],
                                     source="scifact-demo/corpus.jsonl")
                 for a in sorted(abstracts.values(), key=lambda a: a["_id"])]
    assert len(documents) == len(CLAIMS) and len(claims) == len(CLAIMS)
    return documents, claims


async def start(settings: RetrievalSettings, embedder: Embedder):
    servicers, ready = await build_servicers(settings, embedder)
    running = await start_server("retrieval", settings, servicers, ready)
    return running, servicers[0].servicer


@pytest.fixture
async def service(tmp_path, embedder):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", chunk_size=1000,
                                 chunk_overlap=200)
    running, servicer = await start(settings, embedder)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    yield retrieval_service_pb2_grpc.RetrievalServiceStub(channel), channel, settings
    await channel.close()
    await running.stop(0)
    servicer.close()


def violation(error: grpc.aio.AioRpcError) -> str:
    """The field named by the BadRequest detail of an INVALID_ARGUMENT status."""
    for detail in status_from_rpc_error(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError(f"no BadRequest detail in {error}")


def test_embedder_gives_unit_vectors_that_rank_paraphrases_first(embedder):
    vectors = embedder.embed(["Aspirin reduces the risk of stroke.",
                              "Taking aspirin lowers stroke risk.",
                              "The stock market fell on Tuesday."])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.7 > 0.2 > vectors[0] @ vectors[2]


async def test_health_is_serving_once_ready(service):
    _, channel, _ = service
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_ingest_then_each_claim_finds_its_abstract(service, scifact):
    stub, _, _ = service
    documents, claims = scifact
    reply = await stub.IngestDocuments(
        pb.IngestDocumentsRequest(collection="scifact", documents=documents), timeout=120)
    assert reply.document_count == len(CLAIMS) and reply.chunk_count >= len(CLAIMS)
    misses: dict[tuple[int, int], list[str]] = {}
    for claim_id, abstract_id in CLAIMS.items():
        for mode, fusion in MODES:
            response = await stub.SearchDocuments(
                pb.SearchDocumentsRequest(collection="scifact", query=claims[claim_id], top_k=3,
                                          mode=mode, fusion=fusion), timeout=30)
            ranked = [r.document_id for r in response.results]
            if ranked[0] != abstract_id:
                misses.setdefault((mode, fusion), []).append(claim_id)
            top = response.results[0]
            assert len(response.results) < 2 or top.score >= response.results[1].score
            if mode == common_pb2.SEARCH_MODE_DENSE:
                assert -1.0 <= top.score <= 1.0
            # Every mode reports each hit's cosine to the query; dense's score is that cosine.
            assert all(r.HasField("cosine_similarity") and -1 <= r.cosine_similarity <= 1
                       for r in response.results), mode
            if ranked[0] == abstract_id:  # the claim's own abstract is close in meaning
                assert top.cosine_similarity > 0.3, (mode, claim_id)
            if mode == common_pb2.SEARCH_MODE_DENSE:
                assert [r.cosine_similarity for r in response.results] == [
                    r.score for r in response.results]
            source = next(d for d in documents if d.id == top.document_id)
            assert source.text[top.start_offset:top.end_offset] == top.text
            assert (top.title, top.source) == (source.title, source.source)
    # Dense finds every claim's abstract first; BM25 alone misses "0-dimensional biomaterials
    # show inductive properties." (few shared words), and in a corpus of four the fused
    # rankings may follow it there: at most that one miss.
    assert (common_pb2.SEARCH_MODE_DENSE, 0) not in misses, misses
    assert all(len(claims_missed) <= 1 for claims_missed in misses.values()), misses
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert [(c.name, c.chunk_count) for c in listed.collections] == [("scifact", reply.chunk_count)]

    # Filter and minimum score, in every mode.
    for mode, fusion in MODES:
        only = await stub.SearchDocuments(pb.SearchDocumentsRequest(
            collection="scifact", query=claims["13"], top_k=10, filter={"document_id": "1606628"},
            mode=mode, fusion=fusion), timeout=30)
        assert {r.document_id for r in only.results} == {"1606628"}, mode
        every = await stub.SearchDocuments(pb.SearchDocumentsRequest(
            collection="scifact", query=claims["13"], top_k=10, mode=mode, fusion=fusion),
            timeout=30)
        best = every.results[0].score
        strict = await stub.SearchDocuments(pb.SearchDocumentsRequest(
            collection="scifact", query=claims["13"], top_k=10, min_score=best - 1e-4,
            mode=mode, fusion=fusion), timeout=30)
        assert [r.chunk_id for r in strict.results] == [every.results[0].chunk_id], mode

    # Re-ingesting the same documents skips them; a changed one replaces its chunks.
    again = await stub.IngestDocuments(
        pb.IngestDocumentsRequest(collection="scifact", documents=documents), timeout=120)
    assert (again.document_count, again.skipped_document_count, again.chunk_count) == (
        0, len(CLAIMS), 0)
    changed = common_pb2.Document(id=documents[0].id, title="Retitled", text="A short new text.")
    update = await stub.IngestDocuments(
        pb.IngestDocumentsRequest(collection="scifact", documents=[changed]), timeout=120)
    assert (update.document_count, update.updated_document_count, update.chunk_count) == (1, 1, 1)
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    hits = await stub.SearchDocuments(pb.SearchDocumentsRequest(
        collection="scifact", query="short new text", top_k=10,
        filter={"document_id": documents[0].id}), timeout=30)
    assert [(h.title, h.text) for h in hits.results] == [("Retitled", "A short new text.")]


async def test_empty_collection_means_the_default_one(service):
    stub, _, settings = service
    await stub.IngestDocuments(pb.IngestDocumentsRequest(
        documents=[common_pb2.Document(id="n1", text="Notes about enzymes.")]), timeout=60)
    response = await stub.SearchDocuments(pb.SearchDocumentsRequest(query="enzymes"), timeout=30)
    assert [r.document_id for r in response.results] == ["n1"]
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert [c.name for c in listed.collections] == [settings.default_collection]


MODES = [(common_pb2.SEARCH_MODE_DENSE, common_pb2.FUSION_METHOD_UNSPECIFIED),
         (common_pb2.SEARCH_MODE_SPARSE, common_pb2.FUSION_METHOD_UNSPECIFIED),
         (common_pb2.SEARCH_MODE_HYBRID, common_pb2.FUSION_METHOD_DBSF),
         (common_pb2.SEARCH_MODE_HYBRID, common_pb2.FUSION_METHOD_RRF),
         (common_pb2.SEARCH_MODE_UNSPECIFIED, common_pb2.FUSION_METHOD_UNSPECIFIED)]


def _documents(*pairs):
    return [common_pb2.Document(id=i, text=t) for i, t in pairs]


BAD_SEARCHES = [
    (pb.SearchDocumentsRequest(collection="no spaces!", query="q"), "collection"),
    (pb.SearchDocumentsRequest(collection="x" * 65, query="q"), "collection"),
    (pb.SearchDocumentsRequest(query=""), "query"),
    (pb.SearchDocumentsRequest(query="   "), "query"),
    (pb.SearchDocumentsRequest(query="a" * 10_001), "query"),
    (pb.SearchDocumentsRequest(query="q", top_k=0), "top_k"),
    (pb.SearchDocumentsRequest(query="q", top_k=101), "top_k"),
    (pb.SearchDocumentsRequest(query="q", min_score=1.5, mode=common_pb2.SEARCH_MODE_DENSE),
     "min_score"),
    (pb.SearchDocumentsRequest(query="q", min_score=float("inf")), "min_score"),
    (pb.SearchDocumentsRequest(query="q", mode=7), "mode"),
    (pb.SearchDocumentsRequest(query="q", fusion=9), "fusion"),
    (pb.SearchDocumentsRequest(query="q", min_score=float("nan")), "min_score"),
    (pb.SearchDocumentsRequest(query="q", filter={"year": "2020"}), "filter"),
]

BAD_INGESTS = [
    (pb.IngestDocumentsRequest(collection="a/b", documents=_documents(("1", "t"))), "collection"),
    (pb.IngestDocumentsRequest(documents=[]), "documents"),
    (pb.IngestDocumentsRequest(documents=_documents(*[(str(i), "t") for i in range(10_001)])),
     "documents"),
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("", "no id"))),
     "documents[1].id"),
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("2", "ok"), ("3", " \n"))),
     "documents[2].text"),
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("2", ""))), "documents[1].text"),
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("1", "again"))),
     "documents[1].id"),
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("2", "x" * 100_001))),
     "documents[1].text"),
]


async def test_bad_input_is_invalid_argument_naming_the_field_and_writes_nothing(service):
    stub, _, _ = service
    for request, field in BAD_SEARCHES:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.SearchDocuments(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert violation(error.value) == field
    for request, field in BAD_INGESTS:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.IngestDocuments(request, timeout=60)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, field
        assert violation(error.value) == field
    # Nothing half-written: the valid documents before a bad one were not stored.
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert list(listed.collections) == []
    # And the service keeps serving.
    reply = await stub.IngestDocuments(
        pb.IngestDocumentsRequest(documents=_documents(("1", "still serving"))), timeout=60)
    assert reply.document_count == 1


async def test_a_mode_the_collection_was_not_built_for_is_invalid_argument(tmp_path, embedder):
    import qdrant_edge as qe

    # A collection as an earlier version made it: one unnamed dense vector, no BM25 vectors.
    store_dir = tmp_path / "store"
    qe.EdgeShard.create(str(store_dir / "collections" / "old"), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=embedder.dim, distance=qe.Distance.Cosine))).close()
    running, servicer, channel, stub = await _limited_service(tmp_path, embedder)
    try:
        reply = await stub.IngestDocuments(pb.IngestDocumentsRequest(
            collection="old", documents=_documents(("a", "Aspirin lowers the risk of stroke."))),
            timeout=60)
        assert reply.document_count == 1
        for mode in (common_pb2.SEARCH_MODE_SPARSE, common_pb2.SEARCH_MODE_HYBRID):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.SearchDocuments(pb.SearchDocumentsRequest(
                    collection="old", query="aspirin", mode=mode), timeout=30)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert violation(error.value) == "mode"
            assert "built for ['dense'] search only" in error.value.details()
        # Unset, the mode is the best the collection has: dense.
        response = await stub.SearchDocuments(pb.SearchDocumentsRequest(
            collection="old", query="aspirin stroke"), timeout=30)
        assert [r.document_id for r in response.results] == ["a"]
        assert response.results[0].cosine_similarity == response.results[0].score
    finally:
        await channel.close()
        await running.stop(0)
        servicer.close()


async def test_unknown_collection_is_not_found(service):
    stub, _, _ = service
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.SearchDocuments(pb.SearchDocumentsRequest(collection="absent", query="q"),
                                   timeout=30)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert list(listed.collections) == []


async def test_store_outlives_a_restart_and_has_one_owner(tmp_path, embedder):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store")
    running, servicer = await start(settings, embedder)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            await stub.IngestDocuments(pb.IngestDocumentsRequest(
                collection="kept", documents=_documents(("k", "Kept across restarts."))),
                timeout=60)
        # A second service process on the same directory could not open its store.
        with pytest.raises(DataDirLocked):
            open_store(settings)
    finally:
        await running.stop(0)
        servicer.close()
    running, servicer = await start(settings, embedder)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            response = await stub.SearchDocuments(
                pb.SearchDocumentsRequest(collection="kept", query="restarts"), timeout=30)
            assert [r.document_id for r in response.results] == ["k"]
    finally:
        await running.stop(0)
        servicer.close()


async def test_calls_before_ready_are_unavailable():
    servicer = RetrievalServicer("default")
    running = await start_server("retrieval", RetrievalSettings(port=0), [
        Servicer(retrieval_service_pb2_grpc.add_RetrievalServiceServicer_to_server, servicer,
                 SERVICE_NAME)])
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.SearchDocuments(pb.SearchDocumentsRequest(query="q"), timeout=10)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop(0)


async def test_a_filter_with_many_unknown_keys_gets_a_short_error(service):
    stub, _, _ = service
    keys = {f"unknown_key_{i:05d}_" + "x" * 20: "v" for i in range(10_000)}
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await stub.SearchDocuments(pb.SearchDocumentsRequest(query="q", filter=keys), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violation(error.value) == "filter"
    assert "9997 more" in error.value.details()
    assert len(status_from_rpc_error(error.value).SerializeToString()) < 1024


async def _limited_service(tmp_path, embedder, **limits):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", **limits)
    running, servicer = await start(settings, embedder)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    return running, servicer, channel, retrieval_service_pb2_grpc.RetrievalServiceStub(channel)


async def test_size_limits_are_settings_named_in_the_error(tmp_path, embedder):
    running, servicer, channel, stub = await _limited_service(
        tmp_path, embedder, max_document_chars=50, max_documents_per_request=2,
        max_request_bytes=300)
    try:
        cases = [
            (_documents(("1", "x" * 51)), "documents[0].text", "RETRIEVAL_MAX_DOCUMENT_CHARS"),
            (_documents(("1", "a"), ("2", "b"), ("3", "c")), "documents",
             "RETRIEVAL_MAX_DOCUMENTS_PER_REQUEST"),
            (_documents(("1", "y" * 50), ("2", "z" * 50)) * 1, None, None),
        ]
        for documents, field, setting in cases[:2]:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.IngestDocuments(pb.IngestDocumentsRequest(documents=documents),
                                           timeout=30)
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert violation(error.value) == field and setting in error.value.details()
        big = [common_pb2.Document(id=str(i), text="w" * 50, source="s" * 100) for i in range(2)]
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.IngestDocuments(pb.IngestDocumentsRequest(documents=big), timeout=30)
        assert violation(error.value) == "documents"
        assert "RETRIEVAL_MAX_REQUEST_BYTES" in error.value.details()
        listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
        assert list(listed.collections) == []
    finally:
        await channel.close()
        await running.stop(0)
        servicer.close()


class SlowEmbedder:
    """The real encoder, 0.2 s slower per call: long enough for a deadline to pass mid-ingest."""

    def __init__(self, inner) -> None:
        self.inner, self.dim, self.name = inner, inner.dim, inner.name
        self.calls = 0

    def embed(self, texts):
        import time

        self.calls += 1
        time.sleep(0.2)
        return self.inner.embed(texts)


async def test_an_ingest_past_its_deadline_or_cancelled_writes_nothing(tmp_path, embedder):
    import asyncio

    slow = SlowEmbedder(embedder)
    running, servicer, channel, stub = await _limited_service(tmp_path, slow)
    try:
        documents = _documents(*[(str(i), f"Short note {i}.") for i in range(1000)])
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.IngestDocuments(pb.IngestDocumentsRequest(documents=documents),
                                       timeout=0.5)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        call = stub.IngestDocuments(pb.IngestDocumentsRequest(documents=documents), timeout=60)
        await asyncio.sleep(0.5)
        call.cancel()
        # The ingest pool has one worker: this small ingest runs after both stopped ones.
        reply = await stub.IngestDocuments(pb.IngestDocumentsRequest(
            collection="other", documents=_documents(("a", "after"))), timeout=60)
        assert reply.document_count == 1
        assert slow.calls < 12  # 1000 chunks are 8 slices; both ingests stopped early
        listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
        assert [c.name for c in listed.collections] == ["other"]  # nothing of the stopped ones
    finally:
        await channel.close()
        await running.stop(0)
        servicer.close()


async def test_stream_ingest_batches_and_reports_a_repeated_id(tmp_path, embedder):
    running, servicer, channel, stub = await _limited_service(tmp_path, embedder,
                                                              stream_batch_documents=3)

    def stream(*messages):
        async def requests():
            for collection, pairs in messages:
                yield pb.StreamIngestDocumentsRequest(collection=collection,
                                                      documents=_documents(*pairs))
        return requests()

    try:
        reply = await stub.StreamIngestDocuments(stream(
            ("notes", [("1", "Enzymes speed up reactions."), ("2", "Ribosomes make proteins.")]),
            ("", [("3", "Mitochondria make ATP."), ("4", "Cells divide by mitosis.")]),
            ("notes", [("5", "DNA is a double helix.")])), timeout=120)
        assert (reply.document_count, reply.chunk_count, reply.skipped_document_count) == (5, 5, 0)
        again = await stub.StreamIngestDocuments(stream(
            ("notes", [("1", "Enzymes speed up reactions."), ("2", "Ribosomes build proteins.")]),
        ), timeout=120)
        assert (again.document_count, again.skipped_document_count,
                again.updated_document_count) == (1, 1, 1)
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.StreamIngestDocuments(stream(
                ("notes", [("6", "Six."), ("7", "Seven."), ("8", "Eight.")]),
                ("", [("9", "Nine."), ("6", "Six again.")])), timeout=120)
        assert violation(error.value) == "documents[4].id"
        assert "3 documents of the stream before this batch are stored" in error.value.details()
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.StreamIngestDocuments(stream(("notes", [("a", "A.")]),
                                                    ("other", [("b", "B.")])), timeout=120)
        assert violation(error.value) == "collection"
        response = await stub.SearchDocuments(pb.SearchDocumentsRequest(
            collection="notes", query="mitochondria ATP"), timeout=30)
        assert response.results[0].document_id == "3"
    finally:
        await channel.close()
        await running.stop(0)
        servicer.close()


def test_a_second_service_on_the_same_data_dir_exits_with_a_clear_error(tmp_path):
    import os
    import subprocess
    import sys

    from services.retrieval.main import EXIT_DATA_DIR_LOCKED

    held = open_store(RetrievalSettings(data_dir=tmp_path / "store"))
    try:
        env = {**os.environ, "RETRIEVAL_PORT": "0", "RETRIEVAL_DATA_DIR": str(tmp_path / "store")}
        child = subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "serve", "retrieval"],
                               env=env, capture_output=True, text=True, timeout=300)
    finally:
        held.close()
    assert child.returncode == EXIT_DATA_DIR_LOCKED, child.stderr[-2000:]
    assert f"is in use by another process (pid {os.getpid()})" in child.stderr
    assert "Traceback" not in child.stderr
