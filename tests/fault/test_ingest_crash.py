"""Ingest survives SIGKILL at any point: the retrieval service as a real process
(`mcts-mesh serve retrieval`, the embedded store on disk, the real encoder) kills itself with
SIGKILL after a set number of point writes (RETRIEVAL_FAULT_KILL_AFTER_WRITES, a different
number each run: inside a batch of chunks, between the chunks and the heads, between the heads and
the cleanup), while ingesting large documents (about 40 chunks each) that replace the ones stored.

Each run is killed once: either while retrying the ingest the previous run was killed in, or,
once that retry succeeded, while ingesting the next version. After each kill the service is
started again and, through the public gRPC API only, every document is checked to be served whole
at one version (its chunks all findable, its chunk count right, no chunk of another version);
after each successful retry, every document is exactly at the retried version and the collection
holds no chunk of any other (its chunk count is the sum of the documents'). 24 kills, each a
real SIGKILL (the process's exit status says so); a last run without the fault retries and checks
once more.
"""

from __future__ import annotations

import random
import signal

import grpc
import pytest
from faultkit import spawn_service, stop_process
from mesh.common.v1 import common_pb2
from mesh.retrieval.v1 import retrieval_service_pb2 as pb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc

from services.retrieval.chunking import chunk_text

pytestmark = [pytest.mark.fault]

COLLECTION = "crash"
CHUNK_SIZE = 200
DOCUMENTS = 3
SENTENCES = 160
"""Sentences per document: about 40 chunks of 200 characters each."""
KILLS = 24
MAX_RUNS = 40


def version(round_: int, number: int) -> common_pb2.Document:
    """Document `doc-{number}` as round `round_` writes it; every sentence names the round."""
    text = " ".join(f"Round {round_} document {number} sentence {i} tells fact {i * 7 + round_}."
                    for i in range(SENTENCES + round_ % 5))
    return common_pb2.Document(id=f"doc-{number}", title=f"doc {number} round {round_}",
                               text=text, source=f"round-{round_}")


def chunks(document: common_pb2.Document) -> list[str]:
    return [chunk.text for chunk in chunk_text(document.text, CHUNK_SIZE, 0)]


def served_round(stub, number: int) -> int:
    """The round at which `doc-{number}` is served, checked whole: its head's chunk count and
    every chunk of that version found by a search limited to the document, none of another."""
    head = stub.GetDocument(pb.GetDocumentRequest(
        name=f"collections/{COLLECTION}/documents/doc-{number}"), timeout=30)
    round_ = int(head.title.rsplit(" ", 1)[1])
    expected = chunks(version(round_, number))
    assert head.chunk_count == len(expected) <= 100
    found = stub.SearchDocuments(pb.SearchDocumentsRequest(
        collection=COLLECTION, query=f"Round {round_} document {number} fact", top_k=100,
        filter={"document_id": f"doc-{number}"}, mode=common_pb2.SEARCH_MODE_DENSE), timeout=30)
    texts = sorted(result.text for result in found.results)
    assert texts == sorted(expected), f"doc-{number}: a mix of versions or missing chunks"
    assert {result.title for result in found.results} == {head.title}
    return round_


def stored_chunks(stub) -> int:
    listed = stub.ListCollections(pb.ListCollectionsRequest(), timeout=30)
    return next(c.chunk_count for c in listed.collections if c.name == COLLECTION)


def ingest(stub, round_: int) -> pb.IngestDocumentsResponse:
    return stub.IngestDocuments(pb.IngestDocumentsRequest(
        collection=COLLECTION, documents=[version(round_, n) for n in range(DOCUMENTS)]),
        timeout=300)


def round_writes() -> tuple[int, int]:
    """(chunk writes, all writes) of the smallest round: its chunks, then its 3 heads, then the
    cleanup's one delete (each chunk and each head one write)."""
    chunk_writes = min(sum(len(chunks(version(r, n))) for n in range(DOCUMENTS))
                       for r in range(2 * MAX_RUNS))
    return chunk_writes, chunk_writes + DOCUMENTS + 1


def positions() -> list[int]:
    """Where in a round's writes the kills go: the first write, inside the chunks, the last
    chunk, between the heads, the cleanup's delete, and 9 drawn with a fixed seed."""
    chunk_writes, writes = round_writes()
    fixed = [0, 1, 2, writes // 8, writes // 4, writes // 3, writes // 2, 2 * writes // 3,
             3 * writes // 4, chunk_writes - 1, chunk_writes, chunk_writes + 1,
             chunk_writes + 2, writes - 1, 5]
    return fixed + random.Random(29).sample(range(writes), KILLS - len(fixed))


def check_exactly(stub, round_: int) -> None:
    """Every document at `round_`, and no chunk of another version stored."""
    assert [served_round(stub, n) for n in range(DOCUMENTS)] == [round_] * DOCUMENTS
    assert stored_chunks(stub) == sum(len(chunks(version(round_, n))) for n in range(DOCUMENTS))


def test_sigkill_at_any_point_of_an_ingest_then_a_retry_converges(tmp_path):
    env = {"RETRIEVAL_PORT": "0", "RETRIEVAL_DATA_DIR": str(tmp_path / "store"),
           "RETRIEVAL_CHUNK_SIZE": str(CHUNK_SIZE), "RETRIEVAL_CHUNK_OVERLAP": "0",
           "HF_HUB_OFFLINE": "1"}
    process, port = spawn_service("retrieval", env, tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            ingest(stub, 0)
            check_exactly(stub, 0)
    finally:
        stop_process(process)

    pending, kills, retries = 1, 0, 0
    _, writes = round_writes()
    offsets = positions()
    for run in range(MAX_RUNS):
        if kills == KILLS:
            break
        # Even runs: the budget ends inside the first ingest of the run (a retry after a kill,
        # or a new version); odd runs: one round later, so a whole retry fits and the kill lands
        # at the same position of the next version.
        budget = offsets[run % KILLS] + (writes if run % 2 else 0)
        process, port = spawn_service(
            "retrieval", {**env, "RETRIEVAL_FAULT_KILL_AFTER_WRITES": str(budget)}, tmp_path)
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
                # Whatever the last kill interrupted, each document is whole at one version.
                for number in range(DOCUMENTS):
                    assert served_round(stub, number) in (pending - 1, pending)
                try:
                    for _ in range(2):
                        ingest(stub, pending)  # a retry after a kill, or a new version
                        check_exactly(stub, pending)
                        retries += 1
                        pending += 1
                except grpc.RpcError as error:
                    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
                    assert process.wait(60) == -signal.SIGKILL
                    kills += 1
        finally:
            if process.poll() is None:
                stop_process(process)
    assert kills == KILLS, f"{kills} kills in {MAX_RUNS} runs"

    process, port = spawn_service("retrieval", env, tmp_path)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
            reply = ingest(stub, pending)
            assert reply.document_count + reply.skipped_document_count == DOCUMENTS
            check_exactly(stub, pending)
            again = ingest(stub, pending)  # now whole and unchanged: skipped
            assert again.skipped_document_count == DOCUMENTS
    finally:
        stop_process(process)
    assert retries >= KILLS // 3, "runs should get past their first ingest"
