"""Dense retrieval on BEIR SciFact: nDCG@10 and Recall@100 of all-MiniLM-L6-v2, and the latency of
the embedded Qdrant store (`EdgeStore`) against a brute-force numpy dot product.

Protocol as MTEB's retrieval tasks with sentence-transformers (the published 0.64508 nDCG@10,
mteb 1.12.75): each abstract is embedded whole as `(title + " " + text).strip()` (truncated by the
model at 256 word pieces), each claim as its text; cosine similarity; metrics over the 300 test
claims in `qrels/test.tsv`, computed as pytrec_eval's `ndcg_cut.10` and `recall.100`.

    .venv/bin/python bench/retrieval.py [--data ../shared/data/beir-scifact] [--json]

Embedding the 5,183 abstracts takes minutes on two CPU cores; `--cache FILE.npy` keeps the corpus
vectors between runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from services.retrieval.edge_store import EdgeStore
from services.retrieval.embedder import Embedder
from services.retrieval.ingest import read_jsonl
from services.retrieval.ir_metrics import mean_over_queries, ndcg_at_k, recall_at_k
from services.retrieval.store import ChunkRecord

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir-scifact"
TOP_K = 100
PUBLISHED_NDCG_AT_10 = 0.64508


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


def embed_corpus(embedder: Embedder, texts: list[str], cache: Path | None,
                 doc_ids: list[str]) -> tuple[np.ndarray, float]:
    """Corpus vectors float32 [n, 384] and the seconds spent embedding (0 when read from cache)."""
    ids_file = cache.with_suffix(".ids.json") if cache else None
    if cache and cache.is_file() and ids_file.is_file():
        if json.loads(ids_file.read_text()) == doc_ids:
            return np.load(cache), 0.0
    start = time.perf_counter()
    vectors = embedder.embed(texts, show_progress=sys.stderr.isatty())
    seconds = time.perf_counter() - start
    if cache:
        np.save(cache, vectors)
        ids_file.write_text(json.dumps(doc_ids))
    return vectors, seconds


def brute_force(doc_vectors: np.ndarray, query_vectors: np.ndarray, doc_ids: list[str]
                ) -> tuple[list[list[str]], list[float]]:
    """Exact top-100 by dot product (the vectors are unit length), one query at a time."""
    rankings, latencies = [], []
    for query in query_vectors:
        start = time.perf_counter()
        scores = doc_vectors @ query
        top = np.argpartition(-scores, TOP_K)[:TOP_K]
        top = top[np.argsort(-scores[top], kind="stable")]
        latencies.append((time.perf_counter() - start) * 1000)
        rankings.append([doc_ids[i] for i in top])
    return rankings, latencies


def edge_search(doc_vectors: np.ndarray, query_vectors: np.ndarray, doc_ids: list[str],
                titles: list[str], texts: list[str]
                ) -> tuple[list[list[str]], list[float], float]:
    """Top-100 through `EdgeStore` (one point per abstract) in a temporary directory; returns the
    rankings, per-query latencies in ms and the upsert time in s."""
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as data_dir:
        store = EdgeStore(data_dir)
        try:
            store.ensure_collection("scifact", doc_vectors.shape[1])
            start = time.perf_counter()
            for begin in range(0, len(doc_ids), 512):
                end = min(begin + 512, len(doc_ids))
                chunks = [ChunkRecord(doc_ids[i], 0, texts[i], titles[i], "scifact", 0,
                                      len(texts[i])) for i in range(begin, end)]
                store.upsert("scifact", chunks, doc_vectors[begin:end])
            upsert_s = time.perf_counter() - start
            rankings, latencies = [], []
            for query in query_vectors:
                start = time.perf_counter()
                hits = store.search("scifact", query, TOP_K)
                latencies.append((time.perf_counter() - start) * 1000)
                rankings.append([hit.document_id for hit in hits])
        finally:
            store.close()
    return rankings, latencies, upsert_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--split", default="test")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--cache", type=Path, help="corpus vectors .npy to reuse between runs")
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    args = parser.parse_args()

    documents = list(read_jsonl(args.data / "corpus.jsonl"))
    doc_ids = [d.id for d in documents]
    titles = [d.title for d in documents]
    texts = [d.text for d in documents]
    qrels = read_qrels(args.data / "qrels" / f"{args.split}.tsv")
    queries = read_queries(args.data / "queries.jsonl", set(qrels))
    query_ids = sorted(queries)

    start = time.perf_counter()
    embedder = Embedder.load(batch_size=args.batch_size, torch_threads=args.threads)
    load_s = time.perf_counter() - start
    corpus_texts = [f"{title} {text}".strip() for title, text in zip(titles, texts, strict=True)]
    doc_vectors, corpus_s = embed_corpus(embedder, corpus_texts, args.cache, doc_ids)
    start = time.perf_counter()
    query_vectors = embedder.embed([queries[q] for q in query_ids])
    queries_s = time.perf_counter() - start

    exact_rankings, exact_ms = brute_force(doc_vectors, query_vectors, doc_ids)
    edge_rankings, edge_ms, upsert_s = edge_search(doc_vectors, query_vectors, doc_ids, titles,
                                                   texts)

    rows = []
    for name, rankings, latencies in (("numpy brute force", exact_rankings, exact_ms),
                                      ("EdgeStore (qdrant-edge)", edge_rankings, edge_ms)):
        by_query = dict(zip(query_ids, rankings, strict=True))
        rows.append({
            "path": name,
            "ndcg_at_10": mean_over_queries(ndcg_at_k, by_query, qrels, 10),
            "recall_at_100": mean_over_queries(recall_at_k, by_query, qrels, TOP_K),
            "p50_ms": statistics.median(latencies),
            "mean_ms": statistics.fmean(latencies),
        })
    same_top10 = sum(a[:10] == b[:10] for a, b in zip(exact_rankings, edge_rankings, strict=True))

    print(f"BEIR SciFact {args.split}: {len(documents)} abstracts, {len(query_ids)} queries, "
          f"model {embedder.name} (max {embedder.max_seq_length} word pieces), "
          f"torch threads {args.threads}")
    print(f"model load {load_s:.1f} s; corpus embedding "
          + (f"{corpus_s:.1f} s ({len(documents) / corpus_s:.1f} docs/s)" if corpus_s
             else "read from cache")
          + f"; {len(query_ids)} queries {queries_s:.1f} s; EdgeStore upsert {upsert_s:.2f} s")
    print()
    print(f"| {'path':<24} | nDCG@10 | Recall@100 | p50 ms | mean ms | p50 / numpy p50 |")
    print(f"|{'-' * 26}|---------|------------|--------|---------|-----------------|")
    for row in rows:
        ratio = row["p50_ms"] / rows[0]["p50_ms"]
        print(f"| {row['path']:<24} | {row['ndcg_at_10']:.4f}  | {row['recall_at_100']:.4f}     "
              f"| {row['p50_ms']:6.3f} | {row['mean_ms']:7.3f} | {ratio:15.2f} |")
    print()
    ndcg = rows[1]["ndcg_at_10"]
    print(f"published (MTEB) nDCG@10 {PUBLISHED_NDCG_AT_10:.4f}; EdgeStore differs by "
          f"{ndcg - PUBLISHED_NDCG_AT_10:+.4f}; identical top-10 lists: "
          f"{same_top10}/{len(query_ids)}")
    if args.json:
        print(json.dumps({
            "dataset": "beir-scifact", "split": args.split, "queries": len(query_ids),
            "documents": len(documents), "model": embedder.name,
            "ndcg_at_10": round(ndcg, 5), "recall_at_100": round(rows[1]["recall_at_100"], 5),
            "ndcg_at_10_numpy": round(rows[0]["ndcg_at_10"], 5),
            "published_ndcg_at_10": PUBLISHED_NDCG_AT_10,
            "corpus_embed_s": round(corpus_s, 1) if corpus_s else None,
            "edge_p50_ms": round(rows[1]["p50_ms"], 3),
            "numpy_p50_ms": round(rows[0]["p50_ms"], 3),
            "edge_over_numpy_p50": round(rows[1]["p50_ms"] / rows[0]["p50_ms"], 2),
            "identical_top10": same_top10,
        }))


if __name__ == "__main__":
    main()
