"""`mcts-mesh ingest` as a user runs it: a bad file is reported before anything is sent; a good
one is streamed to the orchestrator's StreamIngestDocuments with a progress bar on stderr."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from mcts_mesh.cli import main


def write_jsonl(path, records) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


@pytest.mark.parametrize(("line", "expected"), [
    ("{not json", "corpus.jsonl:3: not JSON"),
    (json.dumps({"_id": "3"}), "corpus.jsonl:3: needs '_id' or 'id', and 'text'"),
    (json.dumps({"_id": "1", "text": "again"}), "corpus.jsonl:3: id '1' repeats"),
    (json.dumps({"_id": "3", "text": "   "}), "document '3' has no text"),
    (json.dumps({"_id": "3" * 1025, "text": "t"}), "corpus.jsonl:3: the document's id has 1025"),
    (json.dumps({"_id": "3", "text": "t", "title": "x" * 1025}),
     "corpus.jsonl:3: the document's title has 1025 characters; at most 1024"),
])
def test_a_bad_line_stops_the_run_before_anything_is_sent(tmp_path, capsys, line, expected):
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"_id": "1", "text": "one"}, {"_id": "2", "text": "two"}, line,
                         {"_id": "4", "text": "four"}])
    # Nothing listens on the target: the run must stop before it would connect.
    code = main(["--target", "127.0.0.1:9", "ingest", str(corpus), "--batch-size", "1"])
    captured = capsys.readouterr()
    assert code == 2
    assert expected in captured.err and "nothing was ingested" in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_missing_path_and_bad_utf8_are_clear_errors(tmp_path, capsys):
    assert main(["ingest", str(tmp_path / "absent.jsonl")]) == 2
    assert "absent.jsonl does not exist" in capsys.readouterr().err
    binary = tmp_path / "notes.txt"
    binary.write_bytes(b"caf\xe9\n")
    assert main(["ingest", str(binary)]) == 2
    assert "notes.txt: not UTF-8 text" in capsys.readouterr().err


class FakeOrchestrator(orchestrator_service_pb2_grpc.OrchestratorServiceServicer):
    def __init__(self) -> None:
        self.messages: list[pb.StreamIngestDocumentsRequest] = []

    def StreamIngestDocuments(self, request_iterator, context):
        for request in request_iterator:
            self.messages.append(request)
        count = sum(len(m.documents) for m in self.messages)
        return pb.StreamIngestDocumentsResponse(document_count=count - 1, chunk_count=2 * count,
                                                skipped_document_count=1,
                                                updated_document_count=1)


@pytest.fixture
def orchestrator():
    fake = FakeOrchestrator()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    orchestrator_service_pb2_grpc.add_OrchestratorServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield fake, f"127.0.0.1:{port}"
    server.stop(0).wait(30)


def test_ingest_streams_with_limit_and_reports_the_summary(tmp_path, capsys, orchestrator):
    fake, target = orchestrator
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"_id": str(i), "title": f"T{i}", "text": f"text {i}"}
                         for i in range(10)] + ["{broken line after the limit"])
    code = main(["--target", target, "ingest", str(corpus), "--collection", "notes",
                 "--batch-size", "3", "--limit", "7"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert [len(m.documents) for m in fake.messages] == [3, 3, 1]
    assert {m.collection for m in fake.messages} == {"notes"}
    assert [d.id for m in fake.messages for d in m.documents] == [str(i) for i in range(7)]
    assert "ingested 6 documents as 14 chunks into 'notes' (1 updated, 1 unchanged and " \
           "skipped)" in captured.out
    assert "7/7" in captured.err  # the progress bar, on stderr, with its total
