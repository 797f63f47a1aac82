"""DBSF and RRF give different, known orders on one hybrid search, on both store backends.

The collection is built so that the two fusions disagree by construction (query: dense `unit(1, 0)`,
words "zebrafish heart"; scores as both backends compute them):

- "granite" is the dense list's clear outlier (cosine 1.0 against 31 chunks near 0) and holds no
  query word, so it is absent from the BM25 list;
- "regen" is second in the dense list (cosine about 0.1) and first in the BM25 list;
- "cells" is last in the dense list (cosine about -0.2) and second in the BM25 list;
- 30 "weather" fillers at cosine 0 hold no query word.

RRF (sum of 1 / (60 + rank), ranks from 0) sees only ranks: "regen" (1/61 + 1/60 = 0.0331) beats
"cells" (1/92 + 1/61 = 0.0273) beats "granite" (1/60 alone = 0.0167). DBSF (each list normalised
by mean +- 3 sample standard deviations, then summed) sees the size of the gap: "granite"'s dense
score normalises to about 1.41, more than "regen"'s two normalised scores together (about
0.57 + 0.62 = 1.19), and "cells" gets about 0.29 + 0.38 = 0.67. So DBSF ranks granite, regen,
cells and RRF regen, cells, granite; a store that ignored `fusion` (or fused both ways alike)
fails one of the two.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc
from qdrant_client import QdrantClient

from libs.server import start_server
from services.retrieval.edge_store import EdgeStore
from services.retrieval.main import build_servicers
from services.retrieval.retriever import Bm25Embedder
from services.retrieval.server_store import ServerStore
from services.retrieval.settings import RetrievalSettings
from services.retrieval.store import ChunkRecord

DIM = 8
QUERY_WORDS = "zebrafish heart"
EXPECTED = {"dbsf": ["granite", "regen", "cells"], "rrf": ["regen", "cells", "granite"]}

# qdrant-client's in-memory double says it ignores payload indexes; the server uses them.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


def unit(*components: float) -> np.ndarray:
    vector = np.zeros(DIM, dtype=np.float32)
    vector[: len(components)] = components
    return vector / np.linalg.norm(vector)


QUERY_VECTOR = unit(1, 0)


def corpus() -> dict[str, tuple[str, np.ndarray]]:
    """document id -> (text, dense vector), as described in the module docstring."""
    documents = {
        "granite": ("Granite quarries supply building stone.", unit(1, 0)),
        "regen": ("Zebrafish heart: zebrafish regenerate heart muscle after injury.",
                  unit(0.1, 1)),
        "cells": ("Zebrafish heart cells.", unit(-0.2, 1)),
    }
    for i in range(30):
        documents[f"weather{i}"] = (f"Filler number {i} about the weather.",
                                    unit(0, 1, 0.01 * i))
    return documents


@pytest.fixture(params=["edge", "server"])
def store(request, tmp_path):
    backend = (EdgeStore(tmp_path / "store") if request.param == "edge"
               else ServerStore(QdrantClient(":memory:")))
    bm25 = Bm25Embedder()
    documents = corpus()
    records = [ChunkRecord(doc, 0, text, "", "test", 0, len(text), fingerprint=f"fp-{doc}")
               for doc, (text, _) in documents.items()]
    backend.ensure_collection("fusion", DIM)
    backend.upsert("fusion", records, np.stack([vector for _, vector in documents.values()]),
                   bm25.embed_documents([r.text for r in records]))
    yield backend, bm25
    backend.close()


def test_each_list_alone_ranks_as_the_construction_says(store):
    backend, bm25 = store
    dense = [h.document_id for h in backend.search("fusion", QUERY_VECTOR, top_k=33)]
    assert dense[:2] == ["granite", "regen"] and dense[-1] == "cells"
    sparse = backend.search("fusion", QUERY_VECTOR, top_k=10, mode="sparse",
                            sparse=bm25.embed_query(QUERY_WORDS))
    assert [h.document_id for h in sparse] == ["regen", "cells"]


@pytest.mark.parametrize("fusion", ["dbsf", "rrf"])
def test_dbsf_and_rrf_give_their_own_known_order(store, fusion):
    backend, bm25 = store
    hits = backend.search("fusion", QUERY_VECTOR, top_k=3, mode="hybrid", fusion=fusion,
                          sparse=bm25.embed_query(QUERY_WORDS))
    assert [h.document_id for h in hits] == EXPECTED[fusion]
    if fusion == "rrf":  # a sum of 1 / (60 + rank): at most 2/60, whatever the raw scores
        assert all(0 < h.score <= 2 / 60 + 1e-6 for h in hits)
    else:  # DBSF keeps the size of granite's lead: its lone normalised score passes 1
        assert hits[0].score > 1.0


class TableEmbedder:
    """The corpus's dense vectors by text (a chunk's embedded text contains its document's text),
    and `QUERY_VECTOR` for the query: the service then sees exactly the construction above."""

    dim = DIM
    name = "fusion-table"

    def embed(self, texts):
        table = [(text, vector) for text, vector in corpus().values()]
        rows = []
        for text in texts:
            found = [vector for known, vector in table if known in text]
            rows.append(QUERY_VECTOR if text == QUERY_WORDS else found[0])
        return np.stack(rows).astype(np.float32)


async def test_the_service_fuses_as_the_request_says(tmp_path):
    """Through the gRPC contract: FUSION_METHOD_DBSF and _RRF reach the store (UNSPECIFIED means
    DBSF), each giving its own order."""
    settings = RetrievalSettings(port=0, data_dir=tmp_path / "store")
    servicers, ready = await build_servicers(settings, TableEmbedder())
    running = await start_server("retrieval", settings, servicers, ready)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            documents = [common_pb2.Document(id=doc, text=text, source="test")
                         for doc, (text, _) in corpus().items()]
            await stub.IngestDocuments(pb.IngestDocumentsRequest(collection="fusion",
                                                                 documents=documents),
                                       timeout=60)
            orders = {}
            for fusion in ("FUSION_METHOD_UNSPECIFIED", "FUSION_METHOD_DBSF",
                           "FUSION_METHOD_RRF"):
                response = await stub.SearchDocuments(pb.SearchDocumentsRequest(
                    collection="fusion", query=QUERY_WORDS, top_k=3,
                    mode=common_pb2.SEARCH_MODE_HYBRID,
                    fusion=common_pb2.FusionMethod.Value(fusion)), timeout=30)
                orders[fusion] = [r.document_id for r in response.results]
    finally:
        await running.stop(0)
        servicers[0].servicer.close()
    assert orders == {"FUSION_METHOD_UNSPECIFIED": EXPECTED["dbsf"],
                      "FUSION_METHOD_DBSF": EXPECTED["dbsf"],
                      "FUSION_METHOD_RRF": EXPECTED["rrf"]}
