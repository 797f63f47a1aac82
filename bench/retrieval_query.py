"""A hybrid top-10 query through one gRPC hop: this checkout's retrieval service against the one of
an earlier commit (the baseline), both running at once over copies of the same store, queried in
turn (the order alternates), so that load on a shared machine falls on both alike.

    .venv/bin/python bench/retrieval_query.py [--baseline-ref 54cc0a6] [--store DIR]
        [--baseline-store DIR] [--documents N] [--queries 300] [--json]

1. builds an embedded store of the first `--documents` SciFact abstracts in this process (each
   abstract one chunk, as bench/retrieval.py stores them; minutes for the whole corpus on two
   cores), or copies `--store` (a directory holding `collections/scifact`, kept from a run with
   `--keep-store DIR`); the baseline gets a copy of `--baseline-store` instead where given: a
   checkout from before the float16 vectors (`edge_store.DENSE_DATATYPE`) cannot open a store
   this checkout built, so keep one with the baseline's own checkout (`--keep-store`) for it;
2. extracts the baseline commit's tree with `git archive` into a temporary directory and starts
   `mcts-mesh serve retrieval` from there and from this checkout (same Python environment, the
   same int8 encoder file, each on its own copy of the store);
3. sends each test claim to both (one gRPC call each, request built beforehand), timing each
   call from this process and reading each service's CPU time (/proc, all its threads) around
   it; checks that both return the same documents.

Prints p50 / p25 / min latency and CPU per query of each, the ratios against the baseline, and
the load average before and after (the machine is shared: read the ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import retrieval_parts
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc
from procstat import cpu_seconds

from services.retrieval.ingest import read_jsonl
from services.retrieval.settings import RetrievalSettings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "beir-scifact"
COLLECTION = "scifact"
CHUNK_SIZE = 4000
"""Characters per chunk: each abstract is one chunk."""


def build_store(data: Path, documents: int | None, directory: Path) -> None:
    """Ingests the first `documents` abstracts into an embedded store at `directory`."""
    from services.retrieval.edge_store import EdgeStore
    from services.retrieval.embedder import load_embedder
    from services.retrieval.retriever import Retriever

    settings = RetrievalSettings()
    corpus = list(read_jsonl(data / "corpus.jsonl"))[:documents]
    embedder = load_embedder(settings.embedder, settings.onnx_path, settings.embed_batch_size,
                             settings.torch_threads)
    retriever = Retriever(EdgeStore(directory), embedder, CHUNK_SIZE, 200)
    try:
        for begin in range(0, len(corpus), 256):
            retriever.ingest(COLLECTION, corpus[begin:begin + 256])
    finally:
        retriever.store.close()


def start_service(code: Path, store: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """`mcts-mesh serve retrieval` run from the source tree `code` over `store`."""
    return retrieval_parts.start_service(
        str(store), work, cwd=code,
        extra_env={"RETRIEVAL_ONNX_PATH": str(RetrievalSettings().onnx_path.resolve()),
                   "PYTHONPATH": str(code)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--baseline-ref", default="54cc0a6",
                        help="git commit whose retrieval service is the baseline")
    parser.add_argument("--store", type=Path, default=None,
                        help="an embedded store with collections/scifact to copy")
    parser.add_argument("--keep-store", type=Path, default=None,
                        help="copy the store built here to this directory for later runs")
    parser.add_argument("--baseline-store", type=Path, default=None,
                        help="a store for the baseline (default: a copy of the same store)")
    parser.add_argument("--documents", type=int, default=None, help="abstracts (default: all)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--json", action="store_true", help="print a final JSON object")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.queries = args.documents or 20, 5
        args.baseline_ref = "HEAD"  # this commit on both sides: a check that it runs

    with (args.data / "queries.jsonl").open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line in lines][: args.queries]
    requests = [rpb.SearchDocumentsRequest(collection=COLLECTION, query=claim, top_k=10,
                                           mode=common_pb2.SEARCH_MODE_HYBRID)
                for claim in claims]
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-query-") as temporary:
        work = Path(temporary)
        source = args.store
        if source is None:
            source = work / "built"
            build_store(args.data, args.documents, source)
            if args.keep_store is not None:
                shutil.copytree(source, args.keep_store, ignore=shutil.ignore_patterns("LOCK"))
        baseline_code = work / "baseline-code"
        baseline_code.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(baseline_code)], input=archive, check=True)
        services = {}
        try:
            for name, code in (("baseline", baseline_code), ("this checkout", ROOT)):
                (work / name).mkdir()
                store = work / name / "store"
                origin = args.baseline_store if name == "baseline" and args.baseline_store \
                    else source
                shutil.copytree(origin, store, ignore=shutil.ignore_patterns("LOCK"))
                services[name] = start_service(code, store, work / name)
            stubs = {name: retrieval_service_pb2_grpc.RetrievalServiceStub(
                grpc.insecure_channel(target)) for name, (_, target) in services.items()}
            for request in requests[:10]:  # warm-up: first calls allocate
                for stub in stubs.values():
                    stub.SearchDocuments(request, timeout=60)
            latencies = {name: [] for name in stubs}
            cpu = dict.fromkeys(stubs, 0.0)
            with_cosine = dict.fromkeys(stubs, 0)  # which code answered: the field is new
            same = 0
            load_before = os.getloadavg()
            for index, request in enumerate(requests):
                order = list(stubs) if index % 2 == 0 else list(reversed(stubs))
                ids = {}
                for name in order:
                    pid = services[name][0].pid
                    cpu_before = cpu_seconds(pid)
                    start = time.perf_counter()
                    response = stubs[name].SearchDocuments(request, timeout=60)
                    latencies[name].append((time.perf_counter() - start) * 1000)
                    cpu[name] += cpu_seconds(pid) - cpu_before
                    ids[name] = [result.document_id for result in response.results]
                    with_cosine[name] += all(r.HasField("cosine_similarity")
                                             for r in response.results)
                same += len({tuple(v) for v in ids.values()}) == 1
            load_after = os.getloadavg()
        finally:
            for process, _ in services.values():
                process.terminate()
            for process, _ in services.values():
                process.wait(30)

    rows = {name: {"p50_ms": statistics.median(values),
                   "p25_ms": statistics.quantiles(values, n=4)[0], "min_ms": min(values),
                   "cpu_ms_per_query": cpu[name] / len(requests) * 1000,
                   "responses_with_cosines": with_cosine[name]}
            for name, values in latencies.items()}
    base = rows["baseline"]
    print(f"hybrid top-10 SearchDocuments through one gRPC hop, {len(requests)} SciFact claims; "
          f"baseline {args.baseline_ref}; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; same documents for {same} of {len(requests)} claims")
    print()
    print("| service | p50 ms | × baseline | p25 ms | min ms | service CPU ms / query "
          "| × baseline | responses with cosines |")
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {row['p50_ms']:.2f} | {row['p50_ms'] / base['p50_ms']:.2f} "
              f"| {row['p25_ms']:.2f} | {row['min_ms']:.2f} | {row['cpu_ms_per_query']:.2f} "
              f"| {row['cpu_ms_per_query'] / base['cpu_ms_per_query']:.2f} "
              f"| {row['responses_with_cosines']} |")
    if args.json:
        print(json.dumps({"baseline_ref": args.baseline_ref, "queries": len(requests),
                          "same_documents": same,
                          "load_average": [round(x, 2) for x in load_before + load_after],
                          **{name.replace(" ", "_"): {k: round(v, 3) for k, v in row.items()}
                             for name, row in rows.items()}}))


if __name__ == "__main__":
    sys.exit(main())
