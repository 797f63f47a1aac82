"""Documents as resources on the orchestrator's public API, over gRPC and REST: the real
orchestrator (port 0) in front of the real retrieval service (port 0, a temporary store, the real
encoder). Get, List (AIP-158 pages), Delete of documents and collections; NOT_FOUND; malformed
names 400 / INVALID_ARGUMENT naming the field; the id/title/source bounds and the caps refused by
the orchestrator's ingest."""

from __future__ import annotations

import socket

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.errors import InvalidArgument
from libs.rest import RestSettings, serve_rest
from libs.server import start_server
from services.orchestrator.api.requests import validate_documents
from services.orchestrator.api.rest import build_rest_app
from services.orchestrator.main import Wiring
from services.orchestrator.main import build_servicers as orchestrator_servicers
from services.orchestrator.settings import OrchestratorSettings
from services.retrieval.embedder import load_embedder
from services.retrieval.main import build_servicers as retrieval_servicers
from services.retrieval.settings import RetrievalSettings


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def embedder():
    settings = RetrievalSettings()
    return load_embedder(settings.embedder, settings.onnx_path, 16, 2)


@pytest.fixture
async def api(tmp_path, embedder):
    """(gRPC stub, REST client) of an orchestrator over a real retrieval service capped at 2
    collections and 3 documents per collection."""
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", max_collections=2,
                                 max_documents_per_collection=3)
    servicers, ready = await retrieval_servicers(settings, embedder)
    retrieval = await start_server("retrieval", settings, servicers, ready)
    unused = f"127.0.0.1:{_closed_port()}"
    orchestrator_settings = OrchestratorSettings(
        port=0, rest_port=-1, retrieval_target=f"127.0.0.1:{retrieval.port}",
        mcts_target=unused, neural_target=unused, llm_target=unused)
    wiring = Wiring(orchestrator_settings)
    o_servicers, o_ready = await orchestrator_servicers(orchestrator_settings, wiring)
    orchestrator = await start_server("orchestrator", orchestrator_settings, o_servicers, o_ready)
    rest = await serve_rest(build_rest_app(orchestrator.in_process,
                                           RestSettings(port=0, default_deadline_s=30.0)),
                            "127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}")
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{rest.port}", timeout=60)
    try:
        yield orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel), client
    finally:
        await client.aclose()
        await channel.close()
        await rest.stop()
        await orchestrator.stop(0)
        await wiring.aclose()
        await retrieval.stop(0)
        servicers[0].servicer.close()


def field_of(error: grpc.aio.AioRpcError) -> str:
    for detail in rpc_status.from_call(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    return ""


async def refused(call, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    return caught.value


def doc(doc_id: str, text: str = "Aspirin lowers the risk of stroke.", **fields):
    return common_pb2.Document(id=doc_id, text=text, **fields)


async def test_documents_over_grpc(api):
    stub, _ = api
    await stub.IngestDocuments(pb.IngestDocumentsRequest(collection="papers", documents=[
        doc("a", title="Aspirin", source="pubmed"), doc("docs/b.md", "Vitamin D. " * 200),
        doc("c")]), timeout=60)
    got = await stub.GetDocument(pb.GetDocumentRequest(name="collections/papers/documents/a"),
                                 timeout=10)
    assert (got.document_id, got.title, got.source, got.chunk_count) == ("a", "Aspirin",
                                                                         "pubmed", 1)
    assert len(got.fingerprint) == 64 and got.version and got.HasField("update_time")
    seen, token = [], ""
    for _ in range(3):
        page = await stub.ListDocuments(pb.ListDocumentsRequest(
            parent="collections/papers", page_size=2, page_token=token), timeout=10)
        seen += [d.name for d in page.documents]
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == ["collections/papers/documents/a", "collections/papers/documents/c",
                            "collections/papers/documents/docs/b.md"] and not token
    await stub.DeleteDocument(pb.DeleteDocumentRequest(name="collections/papers/documents/a"),
                              timeout=10)
    await refused(stub.GetDocument(pb.GetDocumentRequest(name="collections/papers/documents/a"),
                                   timeout=10), grpc.StatusCode.NOT_FOUND)
    error = await refused(stub.ListDocuments(pb.ListDocumentsRequest(
        parent="collections/papers", page_token="garbage"), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert field_of(error) == "page_token"
    for call, field in ((stub.GetDocument(pb.GetDocumentRequest(name="papers/a"), timeout=10),
                         "name"),
                        (stub.ListDocuments(pb.ListDocumentsRequest(parent="collections/a.b"),
                                            timeout=10), "parent"),
                        (stub.DeleteCollection(pb.DeleteCollectionRequest(name="papers"),
                                               timeout=10), "name")):
        assert field_of(await refused(call, grpc.StatusCode.INVALID_ARGUMENT)) == field
    await stub.DeleteCollection(pb.DeleteCollectionRequest(name="collections/papers"),
                                timeout=10)
    await refused(stub.DeleteCollection(pb.DeleteCollectionRequest(name="collections/papers"),
                                        timeout=10), grpc.StatusCode.NOT_FOUND)


async def test_ingest_bounds_and_caps_over_grpc(api):
    stub, _ = api
    for document, field in ((doc("x" * 1025), "documents[0].id"),
                            (doc("t", title="x" * 1025), "documents[0].title"),
                            (doc("s", source="x" * 2049), "documents[0].source")):
        error = await refused(stub.IngestDocuments(pb.IngestDocumentsRequest(
            collection="papers", documents=[document]), timeout=60),
            grpc.StatusCode.INVALID_ARGUMENT)
        assert field_of(error) == field
    await stub.IngestDocuments(pb.IngestDocumentsRequest(
        collection="one", documents=[doc("a"), doc("b"), doc("c")]), timeout=60)
    error = await refused(stub.IngestDocuments(pb.IngestDocumentsRequest(
        collection="one", documents=[doc("d")]), timeout=60), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "RETRIEVAL_MAX_DOCUMENTS_PER_COLLECTION" in error.details()
    await stub.IngestDocuments(pb.IngestDocumentsRequest(collection="two", documents=[doc("a")]),
                               timeout=60)
    error = await refused(stub.IngestDocuments(pb.IngestDocumentsRequest(
        collection="three", documents=[doc("a")]), timeout=60),
        grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "RETRIEVAL_MAX_COLLECTIONS" in error.details()


async def test_documents_over_rest(api):
    _, client = api
    reply = await client.post("/v1/collections/papers/documents:ingest", json={"documents": [
        {"id": "a", "title": "Aspirin", "text": "Aspirin lowers the risk of stroke."},
        {"id": "dir/b.md", "text": "Vitamin D does not prevent fractures."}]})
    assert reply.status_code == 200, reply.text
    got = await client.get("/v1/collections/papers/documents/a")
    assert got.status_code == 200, got.text
    body = got.json()
    assert body["name"] == "collections/papers/documents/a" and body["chunkCount"] == 1
    assert body["title"] == "Aspirin" and len(body["fingerprint"]) == 64
    slashed = await client.get("/v1/collections/papers/documents/dir/b.md")
    assert slashed.status_code == 200 and slashed.json()["documentId"] == "dir/b.md"
    first = await client.get("/v1/collections/papers/documents", params={"pageSize": 1})
    assert first.status_code == 200 and len(first.json()["documents"]) == 1
    second = await client.get("/v1/collections/papers/documents",
                              params={"pageSize": 1,
                                      "pageToken": first.json()["nextPageToken"]})
    assert second.status_code == 200 and len(second.json()["documents"]) == 1
    assert first.json()["documents"] != second.json()["documents"]
    bad = await client.get("/v1/collections/papers/documents", params={"pageToken": "x"})
    assert bad.status_code == 400
    assert bad.json()["details"][0]["fieldViolations"][0]["field"] == "page_token"
    assert (await client.delete("/v1/collections/papers/documents/a")).status_code == 200
    assert (await client.get("/v1/collections/papers/documents/a")).status_code == 404
    long_title = await client.post("/v1/collections/papers/documents:ingest", json={
        "documents": [{"id": "t", "text": "text", "title": "x" * 1025}]})
    assert long_title.status_code == 400
    assert long_title.json()["details"][0]["fieldViolations"][0]["field"] == \
        "documents[0].title"
    assert (await client.delete("/v1/collections/papers")).status_code == 200
    assert (await client.delete("/v1/collections/papers")).status_code == 404


@pytest.mark.parametrize(("document", "field"), [
    (doc("x" * 1025), "documents[0].id"), (doc("t", title="x" * 1025), "documents[0].title"),
    (doc("s", source="x" * 2049), "documents[0].source")])
def test_the_orchestrator_checks_the_bounds_before_forwarding(document, field):
    with pytest.raises(InvalidArgument) as caught:
        validate_documents([document])
    assert caught.value.field == field
    validate_documents([doc("x" * 1024, title="t" * 1024, source="s" * 2048)])
