"""IngestDocuments and StreamIngestDocuments: the documents validated (unary) and forwarded to
the retrieval service within the caller's deadline and `ingest_deadline_s`."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc

from libs.errors import DeadlineExceeded
from services.orchestrator.api.documents import retrieval_error
from services.orchestrator.api.requests import validate_collection, validate_documents


async def ingest(retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub,
                 request: pb.IngestDocumentsRequest, remaining: float | None,
                 limit_s: float) -> pb.IngestDocumentsResponse:
    """Forwards the documents to RetrievalService.IngestDocuments, within `remaining` seconds
    (the caller's; None: no deadline) and `limit_s`.

    Raises:
        InvalidArgument: "collection" or "documents" (or one document's id or text) is bad.
        Unavailable: retrieval is down. DeadlineExceeded: the deadline passed first.
    """
    validate_collection(request.collection, required=True)
    validate_documents(request.documents)
    timeout = limit_s if remaining is None else min(limit_s, remaining)
    if timeout <= 0:
        raise DeadlineExceeded("no time left to ingest")
    try:
        response = await retrieval.IngestDocuments(
            retrieval_service_pb2.IngestDocumentsRequest(
                collection=request.collection, documents=request.documents),
            timeout=timeout)
    except grpc.aio.AioRpcError as error:
        raise retrieval_error(error) from error
    return pb.IngestDocumentsResponse(
        document_count=response.document_count, chunk_count=response.chunk_count,
        skipped_document_count=response.skipped_document_count,
        updated_document_count=response.updated_document_count)


async def stream_ingest(retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub,
                        requests: AsyncIterable[pb.StreamIngestDocumentsRequest],
                        remaining: float | None,
                        limit_s: float) -> pb.StreamIngestDocumentsResponse:
    """Forwards a stream of documents to RetrievalService.StreamIngestDocuments, message by
    message (retrieval validates each; a bad message ends the stream with its error), within
    `remaining` seconds (the caller's), or `limit_s` when the caller set no deadline.

    Raises:
        InvalidArgument: a message's collection or documents are bad (from retrieval).
        Unavailable: retrieval is down. DeadlineExceeded: the deadline passed first.
    """
    timeout = limit_s if remaining is None else remaining
    try:
        response = await retrieval.StreamIngestDocuments(_forwarded(requests), timeout=timeout)
    except grpc.aio.AioRpcError as error:
        raise retrieval_error(error) from error
    return pb.StreamIngestDocumentsResponse(
        document_count=response.document_count, chunk_count=response.chunk_count,
        skipped_document_count=response.skipped_document_count,
        updated_document_count=response.updated_document_count)


async def _forwarded(requests: AsyncIterable[pb.StreamIngestDocumentsRequest]
                     ) -> AsyncIterator[retrieval_service_pb2.StreamIngestDocumentsRequest]:
    async for request in requests:
        yield retrieval_service_pb2.StreamIngestDocumentsRequest(
            collection=request.collection, documents=request.documents)
