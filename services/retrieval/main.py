"""Entry point of the retrieval service: `mcts-mesh serve retrieval` calls `build_servicers`;
`main()` runs it standalone."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc
from qdrant_client import QdrantClient

from libs.server import Servicer, run_service, serve
from services.retrieval import metrics
from services.retrieval.edge_store import DataDirLocked, EdgeStore
from services.retrieval.embedder import Embedder, load_embedder
from services.retrieval.faults import KillAfterWrites
from services.retrieval.retriever import Retriever, StoreLimits
from services.retrieval.server_store import ServerStore
from services.retrieval.servicer import IngestLimits, RetrievalServicer
from services.retrieval.settings import RetrievalSettings
from services.retrieval.store import VectorStore

NAME = "retrieval"
SERVICE_NAME = retrieval_service_pb2.DESCRIPTOR.services_by_name["RetrievalService"].full_name

log = logging.getLogger(__name__)

EXIT_DATA_DIR_LOCKED = 78
"""Exit status when another process holds the data directory (EX_CONFIG of sysexits.h)."""


def open_store(settings: RetrievalSettings) -> VectorStore:
    """A `ServerStore` when `qdrant_url` is set, else the embedded `EdgeStore` under `data_dir`.

    Raises:
        DataDirLocked: another process has `data_dir` open.
    """
    if settings.qdrant_url:
        api_key = settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None
        return ServerStore(QdrantClient(url=settings.qdrant_url, api_key=api_key))
    return EdgeStore(settings.data_dir)


def build_retriever(settings: RetrievalSettings, embedder: Embedder | None = None) -> Retriever:
    """Loads the embedder (unless given: the int8 ONNX encoder by default, torch as the fallback)
    and opens the store (blocking: seconds)."""
    store = open_store(settings)  # first: a locked data directory fails before the model loads
    try:
        embedder = embedder or load_embedder(settings.embedder, settings.onnx_path,
                                             settings.embed_batch_size, settings.torch_threads)
    except BaseException:
        store.close()
        raise
    log.info("retrieval: %s (%d-d, %s) over %s", embedder.name, embedder.dim,
             getattr(embedder, "backend", "torch"), type(store).__name__)
    if settings.fault_kill_after_writes is not None:
        log.warning("retrieval: fault injection: SIGKILL after %d point writes",
                    settings.fault_kill_after_writes)
        store = KillAfterWrites(store, settings.fault_kill_after_writes)
    return Retriever(store, embedder, settings.chunk_size, settings.chunk_overlap,
                     limits=StoreLimits(settings.max_collections,
                                        settings.max_documents_per_collection))


async def build_servicers(
    settings: RetrievalSettings, embedder: Embedder | None = None,
) -> tuple[list[Servicer], Callable[[], Awaitable[None]]]:
    """The retrieval servicer and its readiness hook, which loads the embedder (unless one is
    given; tests share one) and opens the store: health turns SERVING only after both, and then
    follows `servicers[0].servicer.readiness` (the probe: the store can be reached).
    `servicers[0].servicer.close()` releases the store.

    Raises (from the hook):
        DataDirLocked: another process has `settings.data_dir` open.
    """
    limits = IngestLimits(settings.max_document_chars, settings.max_documents_per_request,
                          settings.max_request_bytes, settings.stream_batch_documents)
    metrics.configure(settings.metrics_max_collection_labels)
    servicer = RetrievalServicer(settings.default_collection, limits=limits,
                                 ingest_workers=settings.ingest_workers,
                                 query_workers=settings.query_workers)

    async def ready() -> None:
        servicer.attach(await asyncio.to_thread(build_retriever, settings, embedder))

    return [Servicer(retrieval_service_pb2_grpc.add_RetrievalServiceServicer_to_server, servicer,
                     SERVICE_NAME)], ready


def main(settings: RetrievalSettings | None = None,
         on_listening: Callable[[dict[str, int]], None] | None = None) -> None:
    """Reads `RETRIEVAL_*` settings (unless given), logs them, and serves until SIGTERM."""
    # The model ships in a package; make any accidental hub lookup fail instead of downloading.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = settings or RetrievalSettings()

    async def run() -> None:
        servicers, ready = await build_servicers(settings)
        try:
            await serve(NAME, settings, servicers, ready, on_listening=on_listening,
                        probe=servicers[0].servicer.readiness)
        except DataDirLocked as error:
            log.error("%s: %s", NAME, error.message)
            raise SystemExit(EXIT_DATA_DIR_LOCKED) from None
        finally:
            servicers[0].servicer.close()

    run_service(NAME, settings, run)


if __name__ == "__main__":
    main()
