"""Time to first token added by the mesh over calling the provider directly, on loopback.

A local server speaking OpenAI's streaming wire protocol (server-sent events in chunked transfer
encoding, the first delta sent as soon as the request is read, TCP_NODELAY; a child process, so it
shares no interpreter with the clients) is reached three ways, rounds rotating between them so that
the machine's drift hits them alike:
- direct: the official `openai` SDK's streamed chat completion (`stream=True`, usage included),
  what an application calling the provider itself would do; time to the first content delta;
- gateway: `LlmService.StreamGenerate` of the LLM service (its own process, the same provider as
  "local"), through grpc.aio; time to the first `text_delta`;
- orchestrator: `OrchestratorService.StreamAnswerQuery` with one draft (`sample_count` 1) on a
  fresh mesh (no collection ingested: retrieval answers NOT_FOUND for the default collection and the
  question is answered ungrounded; after the first round the draft's stream starts beside that
  search), the orchestrator, LLM and retrieval services each in its own process; time to the first
  `answer_delta`.
"added" is, per round, the path's time minus the direct call's in the same round; p50 and p95 of
those differences are reported with each path's own p50/p95.

    .venv/bin/python bench/ttft.py [--rounds N] [--warmup W] [--json]

(defaults: 300 rounds after 20 of warm-up; about a minute). `--quick`: 20 rounds after 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served import start_service  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QUESTION = "How many chambers does the heart have?"
WORDS = ["The", " heart", " has", " four", " chambers."] * 4
"""The streamed answer: 20 deltas."""
USAGE = {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}
PATHS = ("direct", "gateway", "orchestrator")


def _events(model: str) -> list[bytes]:
    def chunk(choices: list, usage: dict | None = None) -> bytes:
        return b"data: " + json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_700_000_000,
            "model": model, "choices": choices, "usage": usage}).encode() + b"\n\n"

    events = [chunk([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
              for word in WORDS]
    events.append(chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    events.append(chunk([], USAGE))
    return [*events, b"data: [DONE]\n\n"]


class _Wire(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n")
        events = _events(body.get("model", ""))
        try:
            self.wfile.write(head + b"%x\r\n%s\r\n" % (len(events[0]), events[0]))
            self.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events[1:])
                             + b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve_wire() -> None:
    """The wire server (child process): prints its port, serves until stdin closes."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Wire)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    import threading
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
    server.shutdown()


async def _direct(client) -> float:
    started = time.perf_counter()
    stream = await client.chat.completions.create(
        model="bench-local", messages=[{"role": "user", "content": QUESTION}], max_tokens=64,
        stream=True, stream_options={"include_usage": True})
    first = None
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    return first


async def _gateway(stub, pb) -> float:
    started, first = time.perf_counter(), None
    async for message in stub.StreamGenerate(pb.StreamGenerateRequest(prompt=QUESTION,
                                                                      max_tokens=64), timeout=30):
        if first is None and message.WhichOneof("chunk") == "text_delta":
            first = time.perf_counter() - started
    return first


async def _orchestrator(stub, pb) -> float:
    started, first = time.perf_counter(), None
    async for message in stub.StreamAnswerQuery(pb.StreamAnswerQueryRequest(
            query=QUESTION, sample_count=1), timeout=30):
        if first is None and message.WhichOneof("event") == "answer_delta":
            first = time.perf_counter() - started
        if message.WhichOneof("event") == "response" and not message.response.ungrounded:
            raise RuntimeError("expected an ungrounded answer on a fresh mesh")
    return first


def _start_mesh(wire_url: str, work: Path) -> tuple[list[subprocess.Popen], str, str]:
    llm, llm_ports = start_service("llm", {
        "LLM_PORT": "0", "LLM_METRICS_PORT": "-1", "LLM_FALLBACK_ORDER": '["local"]',
        "LLM_LOCAL_BASE_URL": wire_url, "LLM_LOCAL_MODEL": "bench-local",
        "LLM_OFFLINE_ENABLED": "false", "LLM_MAX_RETRIES": "0"}, work)
    retrieval, retrieval_ports = start_service("retrieval", {
        "RETRIEVAL_PORT": "0", "RETRIEVAL_METRICS_PORT": "-1",
        "RETRIEVAL_DATA_DIR": str(work / "retrieval")}, work)
    orchestrator, ports = start_service("orchestrator", {
        "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "-1",
        "ORCHESTRATOR_METRICS_PORT": "-1", "ORCHESTRATOR_MCTS_TARGET": "127.0.0.1:9",
        "ORCHESTRATOR_NEURAL_TARGET": "127.0.0.1:9",
        "ORCHESTRATOR_LLM_TARGET": f"127.0.0.1:{llm_ports['grpc']}",
        "ORCHESTRATOR_RETRIEVAL_TARGET": f"127.0.0.1:{retrieval_ports['grpc']}"}, work)
    return ([llm, retrieval, orchestrator], f"127.0.0.1:{llm_ports['grpc']}",
            f"127.0.0.1:{ports['grpc']}")


async def measure(wire_url: str, llm_target: str, orchestrator_target: str, rounds: int,
                  warmup: int) -> dict[str, list[float]]:
    """Seconds to the first token per path, `rounds` rounds after `warmup`, paths rotating."""
    import grpc
    import openai
    from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
    from mesh.orchestrator.v1 import orchestrator_service_pb2, orchestrator_service_pb2_grpc

    client = openai.AsyncOpenAI(api_key="none", base_url=wire_url, max_retries=0)
    llm_channel = grpc.aio.insecure_channel(llm_target)
    orchestrator_channel = grpc.aio.insecure_channel(orchestrator_target)
    calls = {
        "direct": lambda: _direct(client),
        "gateway": lambda: _gateway(llm_service_pb2_grpc.LlmServiceStub(llm_channel),
                                    llm_service_pb2),
        "orchestrator": lambda: _orchestrator(
            orchestrator_service_pb2_grpc.OrchestratorServiceStub(orchestrator_channel),
            orchestrator_service_pb2),
    }
    samples: dict[str, list[float]] = {path: [] for path in PATHS}
    try:
        for round_ in range(warmup + rounds):
            order = PATHS[round_ % 3:] + PATHS[:round_ % 3]
            for path in order:
                seconds = await calls[path]()
                if round_ >= warmup:
                    samples[path].append(seconds)
    finally:
        await client.close()
        await llm_channel.close()
        await orchestrator_channel.close()
    return samples


def summarize(samples: dict[str, list[float]]) -> list[dict]:
    """p50/p95 of each path's time to first token, and of its per-round excess over direct (ms)."""
    direct = np.asarray(samples["direct"]) * 1e3
    rows = []
    for path in PATHS:
        values = np.asarray(samples[path]) * 1e3
        added = values - direct
        rows.append({"path": path, "n": len(values),
                     "ttft_p50_ms": float(np.percentile(values, 50)),
                     "ttft_p95_ms": float(np.percentile(values, 95)),
                     "added_p50_ms": float(np.percentile(added, 50)),
                     "added_p95_ms": float(np.percentile(added, 95))})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| path | requests | TTFT p50 ms | TTFT p95 ms | added p50 ms | added p95 ms |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        added = ("-", "-") if row["path"] == "direct" else (
            f"{row['added_p50_ms']:.2f}", f"{row['added_p95_ms']:.2f}")
        lines.append(f"| {row['path']} | {row['n']} | {row['ttft_p50_ms']:.2f} | "
                     f"{row['ttft_p95_ms']:.2f} | {added[0]} | {added[1]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20 rounds after 3 of warm-up")
    parser.add_argument("--wire", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.wire:
        serve_wire()
        return 0
    if args.quick:
        args.rounds, args.warmup = 20, 3
    wire = subprocess.Popen([sys.executable, __file__, "--wire"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    wire_url = f"http://127.0.0.1:{int(wire.stdout.readline())}/v1"
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="bench-ttft-") as work:
        try:
            processes, llm_target, orchestrator_target = _start_mesh(wire_url, Path(work))
            samples = asyncio.run(measure(wire_url, llm_target, orchestrator_target,
                                          args.rounds, args.warmup))
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
            wire.stdin.close()
            wire.wait(timeout=10)
    rows = summarize(samples)
    if args.json:
        print(json.dumps({"cpus": os.cpu_count(), "rounds": args.rounds, "rows": rows},
                         indent=2))
    else:
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
