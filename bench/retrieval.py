"""Retrieval on BEIR SciFact through a running mesh: ingest speed end to end, and nDCG@10 /
Recall@100 of dense, sparse (BM25) and hybrid search (DBSF and RRF), with query latency.

    .venv/bin/python bench/retrieval.py [--data ../shared/data/beir-scifact] [--limit N] [--json]

What it does:
1. starts the whole mesh on free loopback ports (`mcts_mesh.launcher.start_mesh`, as `make run`),
   with the retrieval store in a temporary directory and RETRIEVAL_CHUNK_SIZE=4000, so each
   abstract is one chunk (the dense encoder reads its first 256 word pieces, as MTEB embeds it);
2. streams the corpus through the orchestrator's StreamIngestDocuments (what `mcts-mesh ingest`
   sends) and times it from the first message to the summary: chunking, embedding (the int8 ONNX
   encoder unless the export is missing), BM25 vectors and upserts, end to end;
3. sends every test claim to RetrievalService.SearchDocuments (one gRPC hop from this process) in
   each mode with top_k 100, keeps each document's best chunk, and scores the rankings against
   `qrels/test.tsv` as pytrec_eval's `ndcg_cut.10` and `recall.100`;
4. times hybrid top-10 and dense top-10 queries (the baseline of the latency ratio), each from
   the call to its response with the request built beforehand, and reads the retrieval
   process's CPU time (/proc) around the hybrid pass: CPU per query, which load on a shared
   machine disturbs less than the wall-clock time;
5. before the mesh starts, embeds a sample of abstracts in this process with the int8 ONNX
   encoder and with torch (the baseline of the encoder ratio).

Published anchors on the same split: MTEB's all-MiniLM-L6-v2 nDCG@10 0.645 (dense) and
Anserini's flat BM25 0.679 (BEIR leaderboard). The last line with `--json` is one JSON object.
Ingesting the 5,183 abstracts takes minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as opb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc
from procstat import cpu_seconds

from libs.mesh_auth import with_token
from mcts_mesh.launcher import start_mesh
from services.retrieval.embedder import Embedder, OnnxEmbedder
from services.retrieval.ingest import read_jsonl
from services.retrieval.ir_metrics import mean_over_queries, ndcg_at_k, recall_at_k
from services.retrieval.settings import RetrievalSettings

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir-scifact"
COLLECTION = "scifact"
TOP_K = 100
ANCHORS = {"dense": 0.645, "sparse": 0.679}
"""Published nDCG@10 on SciFact test: MTEB (all-MiniLM-L6-v2) and Anserini flat BM25."""
MODES = {
    "dense": (common_pb2.SEARCH_MODE_DENSE, common_pb2.FUSION_METHOD_UNSPECIFIED),
    "sparse": (common_pb2.SEARCH_MODE_SPARSE, common_pb2.FUSION_METHOD_UNSPECIFIED),
    "hybrid": (common_pb2.SEARCH_MODE_HYBRID, common_pb2.FUSION_METHOD_DBSF),
    "hybrid_rrf": (common_pb2.SEARCH_MODE_HYBRID, common_pb2.FUSION_METHOD_RRF),
}


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (header `query-id corpus-id score`) as query id -> doc id -> grade."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(newline="") as rows:
        for row in csv.DictReader(rows, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    return qrels


def read_queries(path: Path, wanted: set[str]) -> dict[str, str]:
    queries = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if record["_id"] in wanted:
                queries[record["_id"]] = record["text"]
    return queries


def ingest(target: str, documents: list, batch: int) -> tuple[opb.StreamIngestDocumentsResponse,
                                                               float]:
    """Streams `documents` through the orchestrator; returns the summary and the seconds."""
    def messages():
        for begin in range(0, len(documents), batch):
            yield opb.StreamIngestDocumentsRequest(collection=COLLECTION,
                                                   documents=documents[begin:begin + batch])

    with grpc.insecure_channel(target) as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        start = time.perf_counter()
        reply = stub.StreamIngestDocuments(messages(), timeout=3600)
        return reply, time.perf_counter() - start


def rankings(stub, queries: dict[str, str], mode: int, fusion: int, top_k: int
             ) -> tuple[dict[str, list[str]], list[float]]:
    """Per query the document ids best first (each document at its best chunk), and the
    latency of each call in ms: from the call to its response, the request built beforehand
    (this client's own work is not the service's)."""
    ranked, latencies = {}, []
    requests = {query_id: rpb.SearchDocumentsRequest(
        collection=COLLECTION, query=text, top_k=top_k, mode=mode, fusion=fusion)
        for query_id, text in queries.items()}
    for query_id, request in requests.items():
        start = time.perf_counter()
        response = stub.SearchDocuments(request, timeout=60)
        latencies.append((time.perf_counter() - start) * 1000)
        seen: dict[str, None] = {}
        for result in response.results:
            seen.setdefault(result.document_id, None)
        ranked[query_id] = list(seen)
    return ranked, latencies


def encoder_rates(texts: list[str]) -> dict[str, float]:
    """Texts per second of the int8 ONNX encoder and of torch on `texts` (2 threads each)."""
    rates = {}
    for name, encoder in (("onnx", OnnxEmbedder(RetrievalSettings().onnx_path, 32, 2)),
                          ("torch", Embedder.load(batch_size=32, torch_threads=2))):
        encoder.embed(texts[:4])
        start = time.perf_counter()
        encoder.embed(texts)
        rates[name] = len(texts) / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None,
                        help="ingest only the first N abstracts (quality then drops)")
    parser.add_argument("--batch", type=int, default=64, help="documents per stream message")
    parser.add_argument("--encoder-sample", type=int, default=64,
                        help="abstracts embedded by both encoders in this process (0: skip)")
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.limit, args.encoder_sample = args.limit or 40, 4

    corpus = list(read_jsonl(args.data / "corpus.jsonl"))
    qrels = read_qrels(args.data / "qrels" / f"{args.split}.tsv")
    queries = read_queries(args.data / "queries.jsonl", set(qrels))
    queries = dict(sorted(queries.items())[: 20 if args.quick else None])
    documents = corpus[: args.limit]
    if args.quick:  # the quick run's claims find their documents: scores are not all zero
        qrels = {query: qrels[query] for query in queries}
        relevant = {doc for grades in qrels.values() for doc in grades}
        documents += [d for d in corpus[args.limit:] if d.id in relevant]

    sample = [f"{d.title} {d.text}".strip() for d in documents[: args.encoder_sample]]
    rates = encoder_rates(sample) if sample else {}

    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as data_dir:
        env = {"RETRIEVAL_DATA_DIR": data_dir, "RETRIEVAL_CHUNK_SIZE": "4000",
               "HF_HUB_OFFLINE": "1"}
        start = time.perf_counter()
        mesh = start_mesh(port_base=0, rest_port=None, env=env)
        startup_s = time.perf_counter() - start
        try:
            reply, ingest_s = ingest(mesh.target, documents, args.batch)
            log = mesh.logs["retrieval"].read_text(errors="replace")
            backend = "onnx-int8" if "onnx-int8" in log else "torch"
            with grpc.insecure_channel(f"127.0.0.1:{mesh.ports['retrieval']}") as channel:
                # A backend answers only calls that carry the run's mesh token.
                stub = retrieval_service_pb2_grpc.RetrievalServiceStub(
                    with_token(channel, mesh.token))
                rankings(stub, dict(list(queries.items())[:10]), *MODES["hybrid"], 10)  # warm up
                rows = {}
                for name, (mode, fusion) in MODES.items():
                    ranked, latencies = rankings(stub, queries, mode, fusion, TOP_K)
                    rows[name] = {
                        "ndcg_at_10": mean_over_queries(ndcg_at_k, ranked, qrels, 10),
                        "recall_at_100": mean_over_queries(recall_at_k, ranked, qrels, TOP_K),
                        "p50_ms": statistics.median(latencies),
                    }
                _, dense10 = rankings(stub, queries, *MODES["dense"], 10)
                retrieval_pid = mesh.processes["retrieval"].pid
                cpu_before, load = cpu_seconds(retrieval_pid), os.getloadavg()
                _, hybrid10 = rankings(stub, queries, *MODES["hybrid"], 10)
                hybrid_cpu_ms = (cpu_seconds(retrieval_pid) - cpu_before) / len(queries) * 1000
        finally:
            mesh.stop()

    chunks_per_s = reply.chunk_count / ingest_s
    dense_p50, hybrid_p50 = statistics.median(dense10), statistics.median(hybrid10)
    print(f"BEIR SciFact {args.split}: {len(documents)} abstracts, {len(queries)} claims; "
          f"encoder {backend}; os.cpu_count() {os.cpu_count()}; mesh started in "
          f"{startup_s:.0f} s")
    print(f"ingest through the mesh: {reply.document_count} documents, {reply.chunk_count} "
          f"chunks in {ingest_s:.1f} s = {chunks_per_s:.1f} chunks/s "
          f"({reply.document_count / ingest_s:.1f} documents/s)")
    if rates:
        print(f"encoders in this process, {len(sample)} abstracts: int8 ONNX "
              f"{rates['onnx']:.1f} texts/s, torch {rates['torch']:.1f} texts/s "
              f"(ONNX / torch {rates['onnx'] / rates['torch']:.2f})")
    print()
    print("| mode                 | nDCG@10 | Recall@100 | published nDCG@10 | nDCG / dense "
          "| p50 ms (top 100) |")
    print("|----------------------|---------|------------|-------------------|--------------"
          "|------------------|")
    for name, row in rows.items():
        anchor = ANCHORS.get(name)
        label = {"hybrid": "hybrid (DBSF)", "hybrid_rrf": "hybrid (RRF k=60)"}.get(name, name)
        print(f"| {label:<20} | {row['ndcg_at_10']:.4f}  | {row['recall_at_100']:.4f}     "
              f"| {anchor if anchor else '-':<17} "
              f"| {row['ndcg_at_10'] / (rows['dense']['ndcg_at_10'] or math.nan):12.3f} "
              f"| {row['p50_ms']:16.2f} |")
    print()
    print(f"top-10 query p50 through one gRPC hop: hybrid {hybrid_p50:.2f} ms, dense "
          f"{dense_p50:.2f} ms (hybrid / dense {hybrid_p50 / dense_p50:.2f}); the retrieval "
          f"service's CPU per hybrid query {hybrid_cpu_ms:.2f} ms (all its threads); load "
          f"average {load[0]:.2f} when the hybrid pass began")
    if args.json:
        print(json.dumps({
            "dataset": "beir-scifact", "split": args.split, "queries": len(queries),
            "documents": len(documents), "encoder": backend,
            "dense_ndcg_at_10": round(rows["dense"]["ndcg_at_10"], 4),
            "sparse_ndcg_at_10": round(rows["sparse"]["ndcg_at_10"], 4),
            "hybrid_ndcg_at_10": round(rows["hybrid"]["ndcg_at_10"], 4),
            "hybrid_rrf_ndcg_at_10": round(rows["hybrid_rrf"]["ndcg_at_10"], 4),
            "dense_recall_at_100": round(rows["dense"]["recall_at_100"], 4),
            "sparse_recall_at_100": round(rows["sparse"]["recall_at_100"], 4),
            "hybrid_recall_at_100": round(rows["hybrid"]["recall_at_100"], 4),
            "ingest_chunks": reply.chunk_count, "ingest_s": round(ingest_s, 1),
            "ingest_chunks_per_s": round(chunks_per_s, 1),
            "hybrid_top10_p50_ms": round(hybrid_p50, 2),
            "dense_top10_p50_ms": round(dense_p50, 2),
            "hybrid_top10_server_cpu_ms": round(hybrid_cpu_ms, 2),
            "load_average_1m": round(load[0], 2),
            "onnx_texts_per_s": round(rates["onnx"], 1) if rates else None,
            "torch_texts_per_s": round(rates["torch"], 1) if rates else None,
            "published_dense_ndcg_at_10": ANCHORS["dense"],
            "published_bm25_ndcg_at_10": ANCHORS["sparse"],
        }))


if __name__ == "__main__":
    sys.exit(main())
