"""Where retrieval's time goes: the encoder's settings, the stages of an ingest, and the parts of
a hybrid top-10 query, on BEIR SciFact abstracts, in one process (plus one retrieval service).

    .venv/bin/python bench/retrieval_parts.py [--data ../shared/data/beir-scifact] [--baseline-onnx
        PATH] [--encoder-texts 64] [--documents 300] [--queries 200] [--rounds 3] [--json]

1. Encoder: the int8 ONNX export (`RETRIEVAL_ONNX_PATH`) run as the service runs it (batches of
   8, 16 or 32 side by side, one single-threaded pass per core) and as it ran before (batches one
   at a time, each pass over both cores), and, with `--baseline-onnx`, another export with the
   same inputs (the previous recipe's, unfused, e.g. a copy of an export made before this
   version) run as before at batch 32, the baseline of the ratios; rounds interleaved, best round
   reported (the machine is shared: the best round is the one least disturbed).
2. Ingest stages, timed one after the other on `--documents` abstracts (one chunk each, as
   bench/retrieval.py stores them): chunking + fingerprints, tokenisation, the encoder's forward
   passes, BM25 document vectors, and the embedded store's upserts.
3. Query parts, per test claim, hybrid top 10 (DBSF), median over the claims: the query's dense
   vector (tokenise + encoder), its BM25 vector, the store's prefetch + fusion, the whole
   `Retriever.search`, the same through the servicer's query pool from an event loop, and
   SearchDocuments through one gRPC hop to a retrieval service started for the bench
   (`mcts-mesh serve retrieval`, a separate process, on a copy of the same abstracts).

Prints the load average beside the tables; ratios compare parts measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import served
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from services.retrieval import embedder as embedder_module
from services.retrieval.edge_store import EdgeStore
from services.retrieval.embedder import OnnxEmbedder
from services.retrieval.ingest import read_jsonl
from services.retrieval.retriever import PREFETCH_LIMIT, Bm25Embedder, Retriever
from services.retrieval.settings import RetrievalSettings

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir-scifact"
CHUNK_SIZE = 4000
"""Characters per chunk: each abstract is one chunk, as bench/retrieval.py stores them."""
COLLECTION = "scifact"
BATCHES = (8, 16, 32)


def load(args) -> tuple[list, list[str]]:
    documents = list(read_jsonl(args.data / "corpus.jsonl"))[: args.documents]
    with (args.data / "queries.jsonl").open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line in lines][: args.queries]
    return documents, claims


def one_at_a_time(path: Path, batch: int, verify: bool = True):
    """`embed` as the encoder ran before passes went side by side: sorted batches of `batch`,
    one pass at a time, each spread over two intra-op threads."""
    session = embedder_module._session(path, 2)
    tokenizer = OnnxEmbedder(path, batch, 1, verify=verify)

    def embed(texts: list[str]) -> np.ndarray:
        encodings = tokenizer.tokenize(texts)
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for begin in range(0, len(order), batch):
            rows = order[begin:begin + batch]
            out[rows] = embedder_module._run(session, encodings, rows)
        return out

    return embed


def encoder_rates(path: Path, baseline: Path | None, texts: list[str], rounds: int
                  ) -> dict[str, float]:
    """Texts per second (best of `rounds`, interleaved) of each encoder setting."""
    encoders = {}
    if baseline is not None:
        encoders["baseline export, batch 32, one pass at a time"] = one_at_a_time(
            baseline, 32, verify=False)
    encoders["current export, batch 32, one pass at a time"] = one_at_a_time(path, 32)
    encoders["current export, batch 8, one pass at a time"] = one_at_a_time(path, 8)
    for b in BATCHES:
        encoders[f"current export, batch {b}, passes side by side"] = OnnxEmbedder(path, b, 2).embed
    for embed in encoders.values():
        embed(texts[:8])
    best = dict.fromkeys(encoders, 0.0)
    for _ in range(rounds):
        for name, embed in encoders.items():
            start = time.perf_counter()
            embed(texts)
            best[name] = max(best[name], len(texts) / (time.perf_counter() - start))
    return best


def ingest_stages(embedder: OnnxEmbedder, documents: list, store_dir: str) -> dict[str, float]:
    """Seconds of each stage of ingesting `documents` into a fresh embedded store."""
    retriever = Retriever(EdgeStore(store_dir), embedder, CHUNK_SIZE, 200)
    seconds = {}
    start = time.perf_counter()
    fingerprints = [retriever.fingerprint(d) for d in documents]
    records = [r for d, f in zip(documents, fingerprints, strict=True)
               for r in retriever.chunks_of(d, f)]
    texts = [f"{r.title} {r.text}".strip() for r in records]
    seconds["chunking + fingerprints"] = time.perf_counter() - start
    start = time.perf_counter()
    embedder.tokenize(texts)
    seconds["tokenisation"] = time.perf_counter() - start
    start = time.perf_counter()
    vectors = embedder.embed(texts)
    seconds["encoder (tokenisation included)"] = time.perf_counter() - start
    start = time.perf_counter()
    sparse = retriever.sparse_embedder.embed_documents(texts)
    seconds["BM25 document vectors"] = time.perf_counter() - start
    start = time.perf_counter()
    retriever.store.ensure_collection(COLLECTION, embedder.dim)
    seconds["create collection (once)"] = time.perf_counter() - start
    start = time.perf_counter()
    for begin in range(0, len(records), 64):
        retriever.store.upsert(COLLECTION, records[begin:begin + 64], vectors[begin:begin + 64],
                               sparse[begin:begin + 64])
    seconds["store upserts (64 per write)"] = time.perf_counter() - start
    seconds["chunks"] = len(records)
    retriever.store.close()
    return seconds


def query_parts(embedder: OnnxEmbedder, store_dir: str, claims: list[str], target: str,
                baseline: OnnxEmbedder | None = None) -> dict[str, float]:
    """Median milliseconds of each part of a hybrid top-10 query over `claims` (with `baseline`,
    also the query's dense vector by that encoder, interleaved)."""
    retriever = Retriever(EdgeStore(store_dir), embedder, CHUNK_SIZE, 200)
    bm25 = Bm25Embedder()
    pool = ThreadPoolExecutor(2, thread_name_prefix="query")
    loop = asyncio.new_event_loop()

    async def through_pool(query: str):
        return await asyncio.get_running_loop().run_in_executor(
            pool, retriever.search, COLLECTION, query, 10, None, None, "hybrid", "dbsf")

    times: dict[str, list[float]] = {}

    def timed(name, function, *args, **kwargs):
        start = time.perf_counter()
        result = function(*args, **kwargs)
        times.setdefault(name, []).append((time.perf_counter() - start) * 1000)
        return result

    with grpc.insecure_channel(target) as channel:
        stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)

        def grpc_search(query: str):
            return stub.SearchDocuments(rpb.SearchDocumentsRequest(
                collection=COLLECTION, query=query, top_k=10,
                mode=common_pb2.SEARCH_MODE_HYBRID), timeout=30)

        for claim in claims[:10]:  # warm-up: first calls allocate
            grpc_search(claim)
            retriever.search(COLLECTION, claim, 10, mode="hybrid")
        for claim in claims:
            if baseline is not None:
                timed("dense query vector, baseline export", baseline.embed, [claim])
            vector = timed("dense query vector (tokenise + encoder)", embedder.embed, [claim])[0]
            sparse = timed("BM25 query vector", bm25.embed_query, claim)
            timed("store: prefetch both + DBSF fusion", retriever.store.search, COLLECTION,
                  vector, 10, None, None, sparse=sparse, mode="hybrid", fusion="dbsf",
                  prefetch_limit=PREFETCH_LIMIT)
            timed("Retriever.search (all of the above)", retriever.search, COLLECTION, claim,
                  10, None, None, "hybrid", "dbsf")
            timed("... through the query pool from an event loop", loop.run_until_complete,
                  through_pool(claim))
            timed("SearchDocuments through one gRPC hop", grpc_search, claim)
    loop.close()
    pool.shutdown()
    retriever.store.close()
    return {name: statistics.median(values) for name, values in times.items()}


def start_service(data_dir: str, work: Path, extra_env: dict[str, str] | None = None,
                  cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    """A retrieval service on a free port over `data_dir` (as the mesh starts it), with
    `extra_env` added to its environment and run from `cwd` (`bench/retrieval_query.py` runs
    another source tree that way). Returns the process and its gRPC target."""
    env = {"RETRIEVAL_DATA_DIR": data_dir, "RETRIEVAL_PORT": "0", "RETRIEVAL_METRICS_PORT": "0",
           "RETRIEVAL_DEFAULT_COLLECTION": COLLECTION, "HF_HUB_OFFLINE": "1", **(extra_env or {})}
    process, ports = served.start_service("retrieval", env, work, cwd=cwd)
    return process, f"127.0.0.1:{ports['grpc']}"


def print_table(title: str, rows: dict[str, float], unit: str, baseline: str) -> None:
    print(f"| {title} | {unit} | × {baseline[:30]} |")
    print("|---|---|---|")
    for name, value in rows.items():
        print(f"| {name} | {value:.2f} | {value / rows[baseline]:.2f} |")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--baseline-onnx", type=Path, default=None,
                        help="another export to compare the current one with (same inputs)")
    parser.add_argument("--encoder-texts", type=int, default=64)
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.encoder_texts, args.documents, args.queries, args.rounds = 8, 20, 5, 1

    settings = RetrievalSettings()
    documents, claims = load(args)
    texts = [f"{d.title} {d.text}".strip() for d in documents[: args.encoder_texts]]
    load_before = os.getloadavg()
    rates = encoder_rates(settings.onnx_path, args.baseline_onnx, texts, args.rounds)
    embedder = OnnxEmbedder(settings.onnx_path, settings.embed_batch_size,
                            settings.torch_threads)
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-parts-") as work:
        own, served = Path(work) / "own", Path(work) / "served"
        stages = ingest_stages(embedder, documents, str(own))
        ingest_stages(embedder, documents, str(served))
        process, target = start_service(str(served), Path(work))
        try:
            old = None if args.baseline_onnx is None else OnnxEmbedder(
                args.baseline_onnx, settings.embed_batch_size, settings.torch_threads,
                verify=False)
            parts = query_parts(embedder, str(own), claims, target, old)
        finally:
            process.terminate()
            process.wait(30)
    load_after = os.getloadavg()

    print(f"BEIR SciFact: {len(texts)} abstracts through the encoder, {len(documents)} "
          f"ingested, {len(claims)} claims; os.cpu_count() {os.cpu_count()}; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print()
    baseline = next(iter(rates))
    print_table("encoder (best of rounds)", rates, "texts/s", baseline)
    chunks = stages.pop("chunks")
    total = sum(v for k, v in stages.items() if k != "tokenisation")
    print(f"| ingest stage, {chunks} chunks | ms per chunk | share |")
    print("|---|---|---|")
    for name, seconds in stages.items():
        share = "(inside the encoder's)" if name == "tokenisation" else f"{seconds / total:.1%}"
        print(f"| {name} | {seconds / chunks * 1000:.2f} | {share} |")
    print(f"| all stages: {chunks / total:.1f} chunks/s | {total / chunks * 1000:.2f} | |")
    print()
    print_table("hybrid top-10 query part (median over claims)", parts, "ms",
                "SearchDocuments through one gRPC hop")
    if args.json:
        print(json.dumps({"load_average": [round(x, 2) for x in load_before + load_after],
                          "encoder_texts_per_s": {k: round(v, 1) for k, v in rates.items()},
                          "ingest_stage_s": {k: round(v, 3) for k, v in stages.items()},
                          "ingest_chunks": chunks,
                          "query_part_p50_ms": {k: round(v, 3) for k, v in parts.items()}}))


if __name__ == "__main__":
    sys.exit(main())
