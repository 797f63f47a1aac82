"""gRPC edge of the retrieval service: validates requests, turns protos into calls of the
`Retriever` and back. Embedding and store calls run in worker threads so the event loop stays free.
Errors are domain errors; libs.server maps them to status codes."""

from __future__ import annotations

import asyncio
import math
import time

from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.errors import InvalidArgument, Unavailable
from libs.telemetry import set_work_attributes
from services.retrieval import metrics
from services.retrieval.retriever import Retriever
from services.retrieval.store import FILTER_KEYS, Hit, check_collection_name

MAX_QUERY_CHARS = 10_000
MAX_DOCUMENTS = 10_000
DEFAULT_TOP_K = 5
MAX_TOP_K = 100


def resolve_collection(name: str, default: str) -> str:
    """The request's collection, or `default` when empty. Raises InvalidArgument("collection")."""
    name = name or default
    check_collection_name(name)
    return name


def validate_documents(documents) -> None:
    """Checks every document before anything is written.

    Raises:
        InvalidArgument("documents"): none, or more than 10,000.
        InvalidArgument("documents[i].id"): empty, or the same id as an earlier document.
        InvalidArgument("documents[i].text"): empty or only whitespace.
    """
    if not documents:
        raise InvalidArgument("documents", "at least one document is required")
    if len(documents) > MAX_DOCUMENTS:
        raise InvalidArgument("documents", f"{len(documents)} documents; at most {MAX_DOCUMENTS}")
    first_index: dict[str, int] = {}
    for index, document in enumerate(documents):
        if not document.id:
            raise InvalidArgument(f"documents[{index}].id", "a document id is required")
        if document.id in first_index:
            earlier = first_index[document.id]
            raise InvalidArgument(f"documents[{index}].id",
                                  f"{document.id!r} repeats documents[{earlier}].id")
        first_index[document.id] = index
        if not document.text.strip():
            raise InvalidArgument(f"documents[{index}].text", "a document needs non-blank text")


def validate_search(request: pb.SearchDocumentsRequest) -> tuple[int, dict[str, str], float | None]:
    """top_k, filter and min_score of a search request, defaults applied.

    Raises:
        InvalidArgument("query"): empty, blank or longer than 10,000 characters.
        InvalidArgument("top_k"): outside 1..100.
        InvalidArgument("min_score"): outside [-1, 1].
        InvalidArgument("filter"): a key other than document_id, source, title.
    """
    if not request.query.strip():
        raise InvalidArgument("query", "the query is empty")
    if len(request.query) > MAX_QUERY_CHARS:
        raise InvalidArgument("query",
                              f"{len(request.query)} characters; at most {MAX_QUERY_CHARS}")
    top_k = request.top_k if request.HasField("top_k") else DEFAULT_TOP_K
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"{top_k} is outside 1..{MAX_TOP_K}")
    min_score = None
    if request.HasField("min_score"):
        min_score = request.min_score
        if not (math.isfinite(min_score) and -1.0 <= min_score <= 1.0):
            raise InvalidArgument("min_score", f"{min_score} is outside [-1, 1]")
    unknown = sorted(set(request.filter) - set(FILTER_KEYS))
    if unknown:
        raise InvalidArgument("filter", f"unknown keys {unknown}; allowed: {list(FILTER_KEYS)}")
    return top_k, dict(request.filter), min_score


def result_proto(hit: Hit) -> pb.SearchResult:
    return pb.SearchResult(
        chunk_id=hit.chunk_id, document_id=hit.document_id, title=hit.title, text=hit.text,
        source=hit.source, score=hit.score, start_offset=hit.start_offset,
        end_offset=hit.end_offset,
    )


class RetrievalServicer(retrieval_service_pb2_grpc.RetrievalServiceServicer):
    """RetrievalService over a `Retriever`, attached by the readiness hook once the embedder and
    store are loaded; calls before that are UNAVAILABLE."""

    def __init__(self, default_collection: str, retriever: Retriever | None = None) -> None:
        check_collection_name(default_collection)
        self._default_collection = default_collection
        self._retriever = retriever

    def attach(self, retriever: Retriever) -> None:
        self._retriever = retriever
        metrics.set_points(retriever.collections())

    def close(self) -> None:
        """Closes the store (flushes and releases the embedded store's directory)."""
        if self._retriever is not None:
            self._retriever.store.close()
            self._retriever = None

    def _ready(self) -> Retriever:
        if self._retriever is None:
            raise Unavailable("retrieval is starting: the embedder and store are not loaded yet")
        return self._retriever

    async def IngestDocuments(self, request, context):
        collection = resolve_collection(request.collection, self._default_collection)
        validate_documents(request.documents)
        retriever = self._ready()
        result = await asyncio.to_thread(retriever.ingest, collection, request.documents)
        metrics.POINTS.labels(collection).set(
            await asyncio.to_thread(retriever.store.count, collection))
        return pb.IngestDocumentsResponse(document_count=result.document_count,
                                          chunk_count=result.chunk_count)

    async def SearchDocuments(self, request, context):
        collection = resolve_collection(request.collection, self._default_collection)
        top_k, filter, min_score = validate_search(request)
        set_work_attributes({"mesh.retrieval.collection": collection,
                             "mesh.retrieval.top_k": top_k})
        started = time.perf_counter()
        hits = await asyncio.to_thread(self._ready().search, collection, request.query, top_k,
                                       filter, min_score)
        metrics.QUERY_SECONDS.labels(collection).observe(time.perf_counter() - started)
        return pb.SearchDocumentsResponse(results=[result_proto(hit) for hit in hits])

    async def ListCollections(self, request, context):
        collections = await asyncio.to_thread(self._ready().collections)
        metrics.set_points(collections)
        return pb.ListCollectionsResponse(collections=[
            pb.Collection(name=c.name, chunk_count=c.chunk_count) for c in collections])
