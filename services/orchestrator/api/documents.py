"""The orchestrator's document resources: GetDocument, ListDocuments, DeleteDocument and
DeleteCollection, checked here and forwarded to the retrieval service with a deadline (the
caller's, capped by the orchestrator's per-call deadline); and the bounds every ingest is checked
against before it is forwarded.

Resource names (AIP-122): `collections/{collection}` and
`collections/{collection}/documents/{document}`, where the document id is everything after
"/documents/" (ids may hold slashes, e.g. file paths). Page tokens are the retrieval service's,
passed through unchanged (it checks them).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import grpc
from google.protobuf import empty_pb2
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.errors import DeadlineExceeded, InvalidArgument, MeshError, ResourceExhausted, propagate

MAX_DOCUMENT_ID_CHARS = 1_024
MAX_TITLE_CHARS = 1_024
MAX_SOURCE_CHARS = 2_048
"""The retrieval contract's bounds (mesh.retrieval.v1.IngestDocumentsRequest), checked here too
so that a bad request is refused before it is forwarded."""
PARENT = re.compile(r"collections/([a-zA-Z0-9_-]{1,64})")
DOCUMENT = re.compile(r"collections/([a-zA-Z0-9_-]{1,64})/documents/(.+)", re.DOTALL)


def validate_document_fields(documents: Sequence[common_pb2.Document]) -> None:
    """Raises InvalidArgument("documents[i].id" / ".title" / ".source") for a field longer than
    MAX_DOCUMENT_ID_CHARS (1,024) / MAX_TITLE_CHARS (1,024) / MAX_SOURCE_CHARS (2,048)."""
    for index, document in enumerate(documents):
        for field, limit in (("id", MAX_DOCUMENT_ID_CHARS), ("title", MAX_TITLE_CHARS),
                             ("source", MAX_SOURCE_CHARS)):
            length = len(getattr(document, field))
            if length > limit:
                raise InvalidArgument(f"documents[{index}].{field}",
                                      f"{length} characters; at most {limit}")


def check_document_name(name: str) -> None:
    """Raises InvalidArgument("name") unless collections/{collection}/documents/{document} with a
    collection matching ^[a-zA-Z0-9_-]{1,64}$ and an id of 1..1,024 characters."""
    match = DOCUMENT.fullmatch(name)
    if match is None:
        raise InvalidArgument("name", "must be collections/{collection}/documents/{document}, "
                              "the collection matching ^[a-zA-Z0-9_-]{1,64}$")
    if len(match.group(2)) > MAX_DOCUMENT_ID_CHARS:
        raise InvalidArgument("name", f"document id of {len(match.group(2))} characters; at "
                              f"most {MAX_DOCUMENT_ID_CHARS}")


def check_collection_name(name: str, field: str) -> None:
    """Raises InvalidArgument(field) unless collections/{collection}, ^[a-zA-Z0-9_-]{1,64}$."""
    if PARENT.fullmatch(name) is None:
        raise InvalidArgument(field, "must be collections/{collection}, the collection matching "
                              "^[a-zA-Z0-9_-]{1,64}$")


def retrieval_error(error: grpc.aio.AioRpcError) -> MeshError:
    """The domain error of a failed retrieval call: RESOURCE_EXHAUSTED (a cap on collections or
    documents) passes through as such, the rest as `libs.errors.propagate` maps it."""
    if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ResourceExhausted(f"retrieval: {error.details()}")
    return propagate(error, "retrieval")


def _document(document: rpb.Document) -> pb.Document:
    out = pb.Document(name=document.name, document_id=document.document_id,
                      title=document.title, source=document.source,
                      chunk_count=document.chunk_count, version=document.version,
                      fingerprint=document.fingerprint)
    if document.HasField("update_time"):
        out.update_time.CopyFrom(document.update_time)
    return out


class Documents:
    """The document RPCs over a retrieval stub. Reads get `read_deadline_s` at most, deletes
    `write_deadline_s` (each capped by the caller's remaining time).

    Raises (every method): InvalidArgument naming the field; NotFound for an unknown collection
    or document; Unavailable when retrieval is down; DeadlineExceeded when time runs out.
    """

    def __init__(self, retrieval: retrieval_service_pb2_grpc.RetrievalServiceStub,
                 read_deadline_s: float, write_deadline_s: float) -> None:
        self._retrieval = retrieval
        self._read_s = read_deadline_s
        self._write_s = write_deadline_s

    async def get(self, request: pb.GetDocumentRequest, context) -> pb.Document:
        check_document_name(request.name)
        reply = await self._call(self._retrieval.GetDocument,
                                 rpb.GetDocumentRequest(name=request.name), context, self._read_s)
        return _document(reply)

    async def list(self, request: pb.ListDocumentsRequest, context) -> pb.ListDocumentsResponse:
        check_collection_name(request.parent, "parent")
        if request.page_size < 0:
            raise InvalidArgument("page_size", f"{request.page_size} is negative")
        reply = await self._call(self._retrieval.ListDocuments, rpb.ListDocumentsRequest(
            parent=request.parent, page_size=request.page_size, page_token=request.page_token),
            context, self._read_s)
        return pb.ListDocumentsResponse(documents=[_document(d) for d in reply.documents],
                                        next_page_token=reply.next_page_token)

    async def delete(self, request: pb.DeleteDocumentRequest, context) -> empty_pb2.Empty:
        check_document_name(request.name)
        await self._call(self._retrieval.DeleteDocument,
                         rpb.DeleteDocumentRequest(name=request.name), context, self._write_s)
        return empty_pb2.Empty()

    async def delete_collection(self, request: pb.DeleteCollectionRequest,
                                context) -> empty_pb2.Empty:
        check_collection_name(request.name, "name")
        await self._call(self._retrieval.DeleteCollection,
                         rpb.DeleteCollectionRequest(name=request.name), context, self._write_s)
        return empty_pb2.Empty()

    async def _call(self, method, request, context, limit_s: float):
        remaining = context.time_remaining()
        timeout = limit_s if remaining is None else min(limit_s, remaining)
        if timeout <= 0:
            raise DeadlineExceeded("no time left to call retrieval")
        try:
            return await method(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise retrieval_error(error) from error
