"""gRPC edge of the retrieval service: validates requests, turns protos into calls of the
`Retriever` and back. Embedding and store calls run in two bounded thread pools (ingest and
query), so the event loop stays free and queries never queue behind an ingest. Errors are domain
errors; libs.server maps them to status codes."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from google.protobuf import empty_pb2
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from libs.errors import InvalidArgument, MeshError, Unavailable
from libs.telemetry import set_work_attributes
from services.retrieval import metrics, resources
from services.retrieval.resources import MAX_DOCUMENT_ID_CHARS, MAX_SOURCE_CHARS, MAX_TITLE_CHARS
from services.retrieval.retriever import IngestResult, Retriever
from services.retrieval.store import (
    FILTER_KEYS,
    FusionMethod,
    Hit,
    SearchMode,
    check_collection_name,
)

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 10_000
DEFAULT_TOP_K = 5
MAX_TOP_K = 100
MAX_FILTER_KEYS_SHOWN = 3
"""Unknown filter keys quoted in an error (the rest are counted), so the detail stays small."""
MAX_KEY_CHARS_SHOWN = 40

MODES: dict[int, SearchMode | None] = {
    common_pb2.SEARCH_MODE_UNSPECIFIED: None,
    common_pb2.SEARCH_MODE_DENSE: "dense",
    common_pb2.SEARCH_MODE_SPARSE: "sparse",
    common_pb2.SEARCH_MODE_HYBRID: "hybrid",
}
FUSIONS: dict[int, FusionMethod] = {
    common_pb2.FUSION_METHOD_UNSPECIFIED: "dbsf",
    common_pb2.FUSION_METHOD_DBSF: "dbsf",
    common_pb2.FUSION_METHOD_RRF: "rrf",
}


@dataclass(frozen=True)
class IngestLimits:
    """Bounds on ingest input (from RetrievalSettings)."""

    max_document_chars: int = 100_000
    max_documents_per_request: int = 10_000
    max_request_bytes: int = 4_000_000
    stream_batch_documents: int = 64


@dataclass(frozen=True)
class SearchParams:
    top_k: int
    filter: dict[str, str]
    min_score: float | None
    mode: SearchMode | None
    fusion: FusionMethod


def resolve_collection(name: str, default: str) -> str:
    """The request's collection, or `default` when empty. Raises InvalidArgument("collection")."""
    name = name or default
    check_collection_name(name)
    return name


def validate_documents(documents, limits: IngestLimits = IngestLimits(),
                       seen: dict[str, int] | None = None, offset: int = 0) -> None:
    """Checks every document before anything is written.

    `seen` maps ids already met (in earlier messages of a stream) to their position; `offset` is
    the position of this message's first document in the stream.
    Raises:
        InvalidArgument("documents"): none, or more than `limits.max_documents_per_request`.
        InvalidArgument("documents[i].id"): empty, longer than MAX_DOCUMENT_ID_CHARS (1,024),
            or the same id as an earlier document.
        InvalidArgument("documents[i].title" / "documents[i].source"): longer than
            MAX_TITLE_CHARS (1,024) / MAX_SOURCE_CHARS (2,048).
        InvalidArgument("documents[i].text"): empty or only whitespace, or longer than
            `limits.max_document_chars`.
    """
    if not documents:
        raise InvalidArgument("documents", "at least one document is required")
    if len(documents) > limits.max_documents_per_request:
        raise InvalidArgument("documents", f"{len(documents)} documents; at most "
                              f"{limits.max_documents_per_request} per request "
                              "(RETRIEVAL_MAX_DOCUMENTS_PER_REQUEST)")
    first_index: dict[str, int] = {} if seen is None else seen
    for index, document in enumerate(documents, start=offset):
        if not document.id:
            raise InvalidArgument(f"documents[{index}].id", "a document id is required")
        check_lengths(document, index)
        if document.id in first_index:
            earlier = first_index[document.id]
            raise InvalidArgument(f"documents[{index}].id",
                                  f"{_short(document.id)!r} repeats documents[{earlier}].id")
        first_index[document.id] = index
        if len(document.text) > limits.max_document_chars:
            raise InvalidArgument(f"documents[{index}].text",
                                  f"{len(document.text)} characters; at most "
                                  f"{limits.max_document_chars} (RETRIEVAL_MAX_DOCUMENT_CHARS)")
        if not document.text.strip():
            raise InvalidArgument(f"documents[{index}].text", "a document needs non-blank text")


def check_lengths(document, index: int) -> None:
    """Raises InvalidArgument("documents[i].id" / ".title" / ".source") for a field longer than
    its bound (MAX_DOCUMENT_ID_CHARS, MAX_TITLE_CHARS, MAX_SOURCE_CHARS)."""
    for field, limit in (("id", MAX_DOCUMENT_ID_CHARS), ("title", MAX_TITLE_CHARS),
                         ("source", MAX_SOURCE_CHARS)):
        length = len(getattr(document, field))
        if length > limit:
            raise InvalidArgument(f"documents[{index}].{field}",
                                  f"{length} characters; at most {limit}")


def check_request_size(request, limits: IngestLimits) -> None:
    """Raises InvalidArgument("documents") when the serialized request exceeds
    `limits.max_request_bytes`."""
    size = request.ByteSize()
    if size > limits.max_request_bytes:
        raise InvalidArgument("documents", f"request of {size} bytes; at most "
                              f"{limits.max_request_bytes} (RETRIEVAL_MAX_REQUEST_BYTES)")


def _short(text: str) -> str:
    return text if len(text) <= MAX_KEY_CHARS_SHOWN else text[:MAX_KEY_CHARS_SHOWN] + "..."


def validate_search(request: pb.SearchDocumentsRequest) -> SearchParams:
    """top_k, filter, min_score, mode and fusion of a search request, defaults applied (mode
    None: the best the collection supports).

    Raises:
        InvalidArgument("query"): empty, blank or longer than 10,000 characters.
        InvalidArgument("top_k"): outside 1..100.
        InvalidArgument("min_score"): not finite, or outside [-1, 1] for dense search.
        InvalidArgument("filter"): a key other than document_id, source, title (the detail
            quotes at most 3 of them, each cut to 40 characters, and counts the rest).
        InvalidArgument("mode" / "fusion"): a value outside the enum.
    """
    if not request.query.strip():
        raise InvalidArgument("query", "the query is empty")
    if len(request.query) > MAX_QUERY_CHARS:
        raise InvalidArgument("query",
                              f"{len(request.query)} characters; at most {MAX_QUERY_CHARS}")
    top_k = request.top_k if request.HasField("top_k") else DEFAULT_TOP_K
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"{top_k} is outside 1..{MAX_TOP_K}")
    if request.mode not in MODES:
        raise InvalidArgument("mode", f"unknown search mode {request.mode}")
    if request.fusion not in FUSIONS:
        raise InvalidArgument("fusion", f"unknown fusion method {request.fusion}")
    mode = MODES[request.mode]
    min_score = None
    if request.HasField("min_score"):
        min_score = request.min_score
        if not math.isfinite(min_score):
            raise InvalidArgument("min_score", f"{min_score} is not a finite number")
        if mode == "dense" and not -1.0 <= min_score <= 1.0:
            raise InvalidArgument("min_score", f"{min_score} is outside [-1, 1] (cosine)")
    unknown = sorted(set(request.filter) - set(FILTER_KEYS))
    if unknown:
        shown = [_short(key) for key in unknown[:MAX_FILTER_KEYS_SHOWN]]
        more = len(unknown) - len(shown)
        raise InvalidArgument("filter", f"unknown key{'s' if len(unknown) > 1 else ''} {shown}"
                              + (f" and {more} more" if more else "")
                              + f"; allowed: {list(FILTER_KEYS)}")
    return SearchParams(top_k, dict(request.filter), min_score, mode, FUSIONS[request.fusion])


def result_proto(hit: Hit) -> pb.SearchResult:
    return pb.SearchResult(
        chunk_id=hit.chunk_id, document_id=hit.document_id, title=hit.title, text=hit.text,
        source=hit.source, score=hit.score, start_offset=hit.start_offset,
        end_offset=hit.end_offset, cosine_similarity=hit.cosine_similarity,
    )


def stop_signal(context) -> Callable[[], bool]:
    """A check, safe from worker threads, that turns true once the call is over (the caller
    cancelled, or the RPC ended) or its deadline has passed."""
    done = threading.Event()
    context.add_done_callback(lambda _call: done.set())
    remaining = context.time_remaining()
    deadline = None if remaining is None else time.monotonic() + remaining
    return lambda: done.is_set() or (deadline is not None and time.monotonic() >= deadline)


class RetrievalServicer(retrieval_service_pb2_grpc.RetrievalServiceServicer):
    """RetrievalService over a `Retriever`, attached by the readiness hook once the embedder and
    store are loaded; calls before that are UNAVAILABLE."""

    def __init__(self, default_collection: str, retriever: Retriever | None = None,
                 limits: IngestLimits = IngestLimits(), ingest_workers: int = 1,
                 query_workers: int = 2) -> None:
        check_collection_name(default_collection)
        self._default_collection = default_collection
        self._retriever = retriever
        self._limits = limits
        self._ingest_pool = ThreadPoolExecutor(ingest_workers, thread_name_prefix="ingest")
        self._query_pool = ThreadPoolExecutor(query_workers, thread_name_prefix="query")

    def attach(self, retriever: Retriever) -> None:
        self._retriever = retriever
        try:
            metrics.set_points(retriever.collections())
        except Exception as error:  # noqa: BLE001 - a Qdrant server not up yet: the readiness
            # probe reports it; the points are counted at the next ingest or listing
            log.warning("retrieval: collections not counted at start-up: %s", error)

    def close(self) -> None:
        """Stops the pools and closes the store (flushes and releases the embedded store's
        directory)."""
        self._ingest_pool.shutdown(wait=True, cancel_futures=True)
        self._query_pool.shutdown(wait=True, cancel_futures=True)
        if self._retriever is not None:
            self._retriever.store.close()
            self._retriever = None

    async def readiness(self) -> str | None:
        """The service's readiness probe: None while the store can serve, else why not (the
        store is closed, or `VectorStore.check` failed). Runs the check in a worker thread."""
        retriever = self._retriever
        if retriever is None:
            return "the store is not open"
        try:
            await asyncio.to_thread(retriever.store.check)
        except MeshError as error:
            return error.message
        return None

    def _ready(self) -> Retriever:
        if self._retriever is None:
            raise Unavailable("retrieval is starting: the embedder and store are not loaded yet")
        return self._retriever

    async def _run(self, pool: ThreadPoolExecutor, function, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, function, *args)

    async def IngestDocuments(self, request, context):
        collection = resolve_collection(request.collection, self._default_collection)
        check_request_size(request, self._limits)
        validate_documents(request.documents, self._limits)
        result = await self._run(self._ingest_pool, self._ready().ingest, collection,
                                 list(request.documents), stop_signal(context))
        await self._count_points(collection)
        return pb.IngestDocumentsResponse(**_counts(result))

    async def StreamIngestDocuments(self, request_iterator, context):
        retriever = self._ready()
        should_stop = stop_signal(context)
        collection = None
        seen: dict[str, int] = {}
        pending: list = []
        totals = IngestResult(0, 0)

        async def flush() -> None:
            nonlocal totals, pending
            batch, pending = pending, []
            result = await self._run(self._ingest_pool, retriever.ingest, collection, batch,
                                     should_stop)
            totals = IngestResult(
                totals.document_count + result.document_count,
                totals.chunk_count + result.chunk_count,
                totals.skipped_count + result.skipped_count,
                totals.updated_ids + result.updated_ids)

        async for request in request_iterator:
            if collection is None:
                collection = resolve_collection(request.collection, self._default_collection)
            elif request.collection and request.collection != collection:
                raise InvalidArgument("collection", f"{request.collection!r} differs from the "
                                      f"stream's collection {collection!r}")
            try:
                check_request_size(request, self._limits)
                validate_documents(request.documents, self._limits, seen, offset=len(seen))
            except InvalidArgument as error:
                stored = totals.document_count + totals.skipped_count
                raise InvalidArgument(error.field, f"{error.description} (the {stored} documents "
                                      "of the stream before this batch are stored; none after)"
                                      ) from None
            pending.extend(request.documents)
            while len(pending) >= self._limits.stream_batch_documents:
                rest = pending[self._limits.stream_batch_documents:]
                pending = pending[:self._limits.stream_batch_documents]
                await flush()
                pending = rest
        if collection is None:
            raise InvalidArgument("documents", "the stream sent no documents")
        if pending:
            await flush()
        await self._count_points(collection)
        return pb.StreamIngestDocumentsResponse(**_counts(totals))

    async def SearchDocuments(self, request, context):
        collection = resolve_collection(request.collection, self._default_collection)
        params = validate_search(request)
        set_work_attributes({"mesh.retrieval.collection": collection,
                             "mesh.retrieval.top_k": params.top_k})
        started = time.perf_counter()
        # One hand-off: the query pool's thread embeds, searches and builds the response.
        response = await self._run(self._query_pool, self._search, collection, request.query,
                                   params)
        metrics.QUERY_SECONDS.labels(metrics.collection_label(collection)).observe(
            time.perf_counter() - started)
        return response

    async def _count_points(self, collection: str) -> None:
        metrics.set_count(collection,
                          await self._run(self._query_pool, self._ready().store.count, collection))

    def _search(self, collection: str, query: str, params: SearchParams
                ) -> pb.SearchDocumentsResponse:
        hits = self._ready().search(collection, query, params.top_k, params.filter,
                                    params.min_score, params.mode, params.fusion)
        return pb.SearchDocumentsResponse(results=[result_proto(hit) for hit in hits])

    async def ListCollections(self, request, context):
        collections = await self._run(self._query_pool, self._ready().collections)
        metrics.set_points(collections)
        return pb.ListCollectionsResponse(collections=[
            pb.Collection(name=c.name, chunk_count=c.chunk_count) for c in collections])


    async def GetDocument(self, request, context):
        collection, document_id = resources.document_of(request.name)
        head = await self._run(self._query_pool, self._ready().get_document, collection,
                               document_id)
        return resources.document_proto(collection, head)

    async def ListDocuments(self, request, context):
        collection = resources.collection_of(request.parent, "parent")
        page_size = resources.page_size_of(request.page_size)
        offset = resources.decode_page_token(request.page_token, request.parent)
        heads, next_offset = await self._run(self._query_pool, self._ready().list_documents,
                                             collection, page_size, offset)
        return pb.ListDocumentsResponse(
            documents=[resources.document_proto(collection, head) for head in heads],
            next_page_token=resources.encode_page_token(request.parent, next_offset))

    async def DeleteDocument(self, request, context):
        collection, document_id = resources.document_of(request.name)
        await self._run(self._ingest_pool, self._ready().delete_document, collection,
                        document_id)
        await self._count_points(collection)
        return empty_pb2.Empty()

    async def DeleteCollection(self, request, context):
        collection = resources.collection_of(request.name)
        await self._run(self._ingest_pool, self._ready().delete_collection, collection)
        metrics.forget(collection)
        return empty_pb2.Empty()


def _counts(result: IngestResult) -> dict[str, int]:
    return {"document_count": result.document_count, "chunk_count": result.chunk_count,
            "skipped_document_count": result.skipped_count,
            "updated_document_count": result.updated_count}
