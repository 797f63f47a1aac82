"""Documents as resources on the retrieval service (a real grpc.aio server on port 0, the real
encoder): Get, List (AIP-158 pages), Delete of documents and collections; the bounds on id, title
and source, naming the field; the caps on collections and documents per collection; the bounded
`collection` metric label."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc
from prometheus_client import REGISTRY

from libs.errors import status_from_rpc_error
from libs.server import start_server
from services.retrieval import metrics
from services.retrieval.embedder import Embedder, load_embedder
from services.retrieval.main import build_servicers
from services.retrieval.settings import RetrievalSettings


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    settings = RetrievalSettings()
    return load_embedder(settings.embedder, settings.onnx_path, 16, 2)


async def _service(tmp_path, embedder, **overrides):
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store", **overrides)
    servicers, ready = await build_servicers(settings, embedder)
    running = await start_server("retrieval", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)

    async def stop() -> None:
        await channel.close()
        await running.stop(0)
        servicers[0].servicer.close()

    return stub, stop


@pytest.fixture
async def stub(tmp_path, embedder):
    stub, stop = await _service(tmp_path, embedder, max_collections=2,
                                max_documents_per_collection=5, metrics_max_collection_labels=1)
    yield stub
    await stop()


def violation(error: grpc.aio.AioRpcError) -> str:
    for detail in status_from_rpc_error(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    return ""


def doc(doc_id: str, text: str = "Aspirin lowers the risk of stroke.", title: str = "T",
        source: str = "s") -> common_pb2.Document:
    return common_pb2.Document(id=doc_id, title=title, text=text, source=source)


async def ingest(stub, collection: str, *documents) -> pb.IngestDocumentsResponse:
    return await stub.IngestDocuments(
        pb.IngestDocumentsRequest(collection=collection, documents=documents), timeout=60)


async def refused(call, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, caught.value.details()
    return caught.value


async def test_get_list_and_delete_documents(stub):
    await ingest(stub, "papers", doc("a", title="Aspirin", source="pubmed"),
                 doc("dir/b.md", "Vitamin D does not prevent fractures. " * 60),
                 doc("c", "Zebrafish regrow hearts."))
    got = await stub.GetDocument(pb.GetDocumentRequest(name="collections/papers/documents/a"),
                                 timeout=10)
    assert (got.name, got.document_id, got.title, got.source, got.chunk_count) == (
        "collections/papers/documents/a", "a", "Aspirin", "pubmed", 1)
    assert len(got.fingerprint) == 64 and got.version and got.update_time.seconds > 0
    slashed = await stub.GetDocument(
        pb.GetDocumentRequest(name="collections/papers/documents/dir/b.md"), timeout=10)
    assert slashed.document_id == "dir/b.md" and slashed.chunk_count > 1
    # A re-ingest with other text is a new version.
    await ingest(stub, "papers", doc("a", "Aspirin thins the blood.", title="Aspirin 2"))
    again = await stub.GetDocument(pb.GetDocumentRequest(name=got.name), timeout=10)
    assert again.version != got.version and again.title == "Aspirin 2"

    # Pages of 2: every document once, then no token.
    seen, token, pages = [], "", 0
    while True:
        page = await stub.ListDocuments(pb.ListDocumentsRequest(
            parent="collections/papers", page_size=2, page_token=token), timeout=10)
        seen.extend(d.document_id for d in page.documents)
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == ["a", "c", "dir/b.md"] and pages == 2

    await stub.DeleteDocument(pb.DeleteDocumentRequest(name="collections/papers/documents/c"),
                              timeout=10)
    await refused(stub.GetDocument(pb.GetDocumentRequest(name="collections/papers/documents/c"),
                                   timeout=10), grpc.StatusCode.NOT_FOUND)
    await refused(stub.DeleteDocument(pb.DeleteDocumentRequest(
        name="collections/papers/documents/c"), timeout=10), grpc.StatusCode.NOT_FOUND)
    found = await stub.SearchDocuments(pb.SearchDocumentsRequest(
        collection="papers", query="zebrafish hearts", top_k=10), timeout=30)
    assert "c" not in {r.document_id for r in found.results}
    # Search results carry the title and source stored once, in the document's head.
    assert {(r.document_id, r.title) for r in found.results} >= {("a", "Aspirin 2")}

    await stub.DeleteCollection(pb.DeleteCollectionRequest(name="collections/papers"),
                                timeout=10)
    await refused(stub.GetDocument(pb.GetDocumentRequest(name=got.name), timeout=10),
                  grpc.StatusCode.NOT_FOUND)
    await refused(stub.DeleteCollection(pb.DeleteCollectionRequest(name="collections/papers"),
                                        timeout=10), grpc.StatusCode.NOT_FOUND)
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert list(listed.collections) == []


@pytest.mark.parametrize(("request_", "field"), [
    (pb.GetDocumentRequest(name="papers/a"), "name"),
    (pb.GetDocumentRequest(name="collections/pa.pers/documents/a"), "name"),
    (pb.GetDocumentRequest(name="collections/papers/documents/"), "name"),
    (pb.GetDocumentRequest(name="collections/papers/documents/" + "x" * 1025), "name"),
    (pb.ListDocumentsRequest(parent="collections/"), "parent"),
    (pb.ListDocumentsRequest(parent="collections/papers", page_size=-1), "page_size"),
    (pb.ListDocumentsRequest(parent="collections/papers", page_token="not-a-token"),
     "page_token"),
    (pb.DeleteCollectionRequest(name="collections/a/b"), "name"),
])
async def test_malformed_names_and_pages_are_invalid_argument(stub, request_, field):
    method = {pb.GetDocumentRequest: stub.GetDocument, pb.ListDocumentsRequest: stub.ListDocuments,
              pb.DeleteCollectionRequest: stub.DeleteCollection}[type(request_)]
    error = await refused(method(request_, timeout=10), grpc.StatusCode.INVALID_ARGUMENT)
    assert violation(error) == field


async def test_a_page_token_of_another_parent_is_invalid_argument(stub):
    await ingest(stub, "one", doc("a"), doc("b"))
    page = await stub.ListDocuments(pb.ListDocumentsRequest(parent="collections/one",
                                                            page_size=1), timeout=10)
    assert page.next_page_token
    error = await refused(stub.ListDocuments(pb.ListDocumentsRequest(
        parent="collections/two", page_token=page.next_page_token), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT)
    assert violation(error) == "page_token"
    await refused(stub.ListDocuments(pb.ListDocumentsRequest(parent="collections/absent"),
                                     timeout=10), grpc.StatusCode.NOT_FOUND)


@pytest.mark.parametrize(("document", "field"), [
    (doc("x" * 1025), "documents[1].id"),
    (doc("t", title="x" * 1025), "documents[1].title"),
    (doc("s", source="x" * 2049), "documents[1].source"),
])
async def test_long_ids_titles_and_sources_are_invalid_argument(stub, document, field):
    error = await refused(ingest(stub, "papers", doc("ok"), document),
                          grpc.StatusCode.INVALID_ARGUMENT)
    assert violation(error) == field
    listed = await stub.ListCollections(pb.ListCollectionsRequest(), timeout=10)
    assert list(listed.collections) == []  # nothing written
    # At the bound exactly, accepted.
    reply = await ingest(stub, "papers", doc("x" * 1024, title="t" * 1024, source="s" * 2048))
    assert reply.document_count == 1


async def test_caps_on_collections_and_documents_are_resource_exhausted(stub):
    await ingest(stub, "one", *[doc(str(i)) for i in range(4)])
    await ingest(stub, "two", doc("a"))
    error = await refused(ingest(stub, "three", doc("a")), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "RETRIEVAL_MAX_COLLECTIONS" in error.details()
    error = await refused(ingest(stub, "one", doc("4"), doc("5")),
                          grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "RETRIEVAL_MAX_DOCUMENTS_PER_COLLECTION" in error.details()
    # Updating stored documents and adding up to the cap still work.
    assert (await ingest(stub, "one", doc("0", "Other text."), doc("4"))).document_count == 2
    # Deleting a collection makes room for another.
    await stub.DeleteCollection(pb.DeleteCollectionRequest(name="collections/two"), timeout=10)
    assert (await ingest(stub, "three", doc("a"))).document_count == 1
    # One collection has its own label (RETRIEVAL_METRICS_MAX_COLLECTION_LABELS=1), the rest
    # share "other".
    labels = {sample.labels["collection"]
              for metric in REGISTRY.collect() if metric.name == "mesh_retrieval_collection_points"
              for sample in metric.samples}
    assert {"one", metrics.OTHER} <= labels and not {"two", "three"} & labels
