"""Ingest throughput of the retrieval core in one process: `Retriever.ingest` of BEIR SciFact
abstracts into a fresh embedded store, in batches as a stream delivers them, timed in wall-clock
and in this process's CPU seconds (which a shared machine's load disturbs less).

    .venv/bin/python bench/retrieval_ingest.py [--data ../shared/data/beir-scifact]
        [--documents 1000] [--batch 64] [--encoder onnx|hash] [--json]

`--encoder onnx` is the service's int8 ONNX encoder (what an ingest costs end to end, less gRPC);
`--encoder hash` a bag-of-words hash in numpy, so the store's writes (the head protocol: chunks,
heads, cleanup) dominate and their cost shows. Each abstract is one chunk (RETRIEVAL_CHUNK_SIZE
4000, as bench/retrieval.py stores them). To compare two versions of the code, run the same file
with PYTHONPATH naming each tree (and its libs/stubs), alternately.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

from services.retrieval.edge_store import EdgeStore
from services.retrieval.embedder import load_embedder
from services.retrieval.ingest import read_jsonl
from services.retrieval.retriever import Retriever
from services.retrieval.settings import RetrievalSettings

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beir-scifact"


class HashEmbedder:
    """Each word adds 1 to a hashed component of 384; rows L2-normalised."""

    dim = 384
    name = "hash-384"

    def embed(self, texts):
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                vectors[row, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--encoder", choices=("onnx", "hash"), default="onnx")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.batch = 32, 16
    documents = list(read_jsonl(args.data / "corpus.jsonl"))[: args.documents]
    settings = RetrievalSettings()
    embedder = (load_embedder(settings.embedder, settings.onnx_path, settings.embed_batch_size,
                              settings.torch_threads)
                if args.encoder == "onnx" else HashEmbedder())
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as directory:
        store = EdgeStore(directory)
        retriever = Retriever(store, embedder, chunk_size=4000, chunk_overlap=200)
        chunks = 0
        wall, cpu = time.perf_counter(), time.process_time()
        for begin in range(0, len(documents), args.batch):
            chunks += retriever.ingest("bench", documents[begin:begin + args.batch]).chunk_count
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        store.close()
    result = {"encoder": args.encoder, "documents": len(documents), "chunks": chunks,
              "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
              "chunks_per_s": round(chunks / wall, 1),
              "chunks_per_cpu_s": round(chunks / cpu, 1)}
    print(f"{'encoder':<8} {'chunks':>7} {'wall s':>8} {'chunks/s':>9} {'CPU s':>8} "
          f"{'chunks/CPU-s':>13}")
    print(f"{args.encoder:<8} {chunks:>7} {wall:>8.2f} {chunks / wall:>9.1f} {cpu:>8.2f} "
          f"{chunks / cpu:>13.1f}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
