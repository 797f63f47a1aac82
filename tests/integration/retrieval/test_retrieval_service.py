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
from services.retrieval.embedder import Embedder
from services.retrieval.main import SERVICE_NAME, build_servicers, open_store
from services.retrieval.servicer import RetrievalServicer
from services.retrieval.settings import RetrievalSettings

# Test claims of SciFact with exactly one relevant abstract each: claim id -> abstract id.
CLAIMS = {"1": "31715818", "3": "14717500", "5": "13734012", "13": "1606628", "42": "18174210"}


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load(batch_size=16, torch_threads=2)


@pytest.fixture(scope="module")
def scifact(data_dir):
    root = data_dir / "beir-scifact"
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
                                     source="beir-scifact/corpus.jsonl")
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
    assert reply.document_count == 5 and reply.chunk_count >= 5
    for claim_id, abstract_id in CLAIMS.items():
        response = await stub.SearchDocuments(
            pb.SearchDocumentsRequest(collection="scifact", query=claims[claim_id], top_k=3),
            timeout=30)
        top = response.results[0]
        assert top.document_id == abstract_id, claims[claim_id]
        assert -1.0 <= top.score <= 1.0 and top.score >= response.results[1].score
        source = next(d for d in documents if d.id == abstract_id)
        assert source.text[top.start_offset:top.end_offset] == top.text
        assert (top.title, top.source) == (source.title, source.source)

    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert [(c.name, c.chunk_count) for c in listed.collections] == [("scifact", reply.chunk_count)]

    # Filter and minimum score.
    only = await stub.SearchDocuments(pb.SearchDocumentsRequest(
        collection="scifact", query=claims["1"], top_k=10, filter={"document_id": "1606628"}),
        timeout=30)
    assert {r.document_id for r in only.results} == {"1606628"}
    strict = await stub.SearchDocuments(pb.SearchDocumentsRequest(
        collection="scifact", query=claims["1"], top_k=10, min_score=0.99), timeout=30)
    assert list(strict.results) == []

    # Re-ingesting the same documents replaces their chunks instead of adding to them.
    again = await stub.IngestDocuments(
        pb.IngestDocumentsRequest(collection="scifact", documents=documents), timeout=120)
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert listed.collections[0].chunk_count == again.chunk_count == reply.chunk_count


async def test_empty_collection_means_the_default_one(service):
    stub, _, settings = service
    await stub.IngestDocuments(pb.IngestDocumentsRequest(
        documents=[common_pb2.Document(id="n1", text="Notes about enzymes.")]), timeout=60)
    response = await stub.SearchDocuments(pb.SearchDocumentsRequest(query="enzymes"), timeout=30)
    assert [r.document_id for r in response.results] == ["n1"]
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert [c.name for c in listed.collections] == [settings.default_collection]


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
    (pb.SearchDocumentsRequest(query="q", min_score=1.5), "min_score"),
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
    (pb.IngestDocumentsRequest(documents=_documents(("1", "ok"), ("1", "again"))),
     "documents[1].id"),
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
