"""What the operating features cost a request: the same orchestrator build with them on and off, in
one run, over gRPC and through the REST front.

Starts two orchestrator processes exactly as `mcts-mesh serve orchestrator` runs them:
- "off": no metrics (`ORCHESTRATOR_METRICS_PORT=-1`, so no RPC metrics either) and no exporter
  (the sampler is then off: spans are non-recording);
- "on": a metrics port, and every request traced (sample ratio 1, `--sample-ratio`) and exported
  over OTLP/gRPC (BatchSpanProcessor) to an OTLP collector this script runs in-process, which
  receives and counts the spans; plus whatever `--on-env NAME=VALUE` adds (API keys and rate limits:
  `--on-env ORCHESTRATOR_REQUIRE_API_KEY=true --api-key KEY`, once the access feature exists).

The request is cheap and real: `SolveProblem` on an end-game Connect Four position with the checker
agent alone (its exact solver answers in a few hundred nodes; no other service is called). Requests
alternate between the two servers and the two transports (a kept-alive gRPC channel, and one
kept-alive `http.client` connection per REST front: the lightest HTTP/1.1 client, so that what the
REST rows add is the front's cost, not a client library's), after a warm-up, so that both see the
same machine. The OTLP collector runs in its own process, as Jaeger or an OpenTelemetry Collector
would: in the client's process its decoding would hold the timing client's GIL.

    .venv/bin/python bench/overhead.py [--requests N] [--warmup N] [--sample-ratio R]
        [--on-env K=V ...] [--api-key KEY] [--json]

Prints p50/p99 per (transport, features) in ms, the deltas on - off, and the REST front's own cost
(REST minus gRPC for the same server).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

REPO = Path(__file__).resolve().parents[1]
MOVES = "2252576253462244111563365343671351441"
"""An end-game position of Pons' Test_L3_R1 (score -1): the checker solves it exactly."""
UNUSED_TARGET = "127.0.0.1:9"
"""Downstream targets of the benchmarked orchestrators: never called by a checker-only request."""


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that counts the spans it gets and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.spans += len(scope_spans.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


def _serve_collector() -> None:
    """The collector process: prints its port, serves until stdin closes, prints the span count."""
    receiver = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    sys.stdin.read()
    server.stop(0)
    print(receiver.spans, flush=True)


def _start_orchestrator(name: str, env: dict[str, str], run_dir: Path):
    port_file = run_dir / f"{name}.json"
    log = (run_dir / f"{name}.log").open("wb")
    child_env = {**os.environ, "ORCHESTRATOR_PORT": "0", "ORCHESTRATOR_REST_PORT": "0",
                 "ORCHESTRATOR_MCTS_TARGET": UNUSED_TARGET,
                 "ORCHESTRATOR_NEURAL_TARGET": UNUSED_TARGET,
                 "ORCHESTRATOR_RETRIEVAL_TARGET": UNUSED_TARGET,
                 "ORCHESTRATOR_LLM_TARGET": UNUSED_TARGET, **env}
    process = subprocess.Popen(
        [sys.executable, "-m", "mcts_mesh.cli", "serve", "orchestrator", "--port-file",
         str(port_file)], env=child_env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + 120
    while not (port_file.exists() and port_file.stat().st_size):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"orchestrator {name} did not start; log {run_dir / name}.log")
        time.sleep(0.1)
    return process, json.loads(port_file.read_text())


def _grpc_call(stub, request, metadata):
    def call() -> None:
        stub.SolveProblem(request, timeout=30, metadata=metadata)

    return call


def _rest_call(connection: http.client.HTTPConnection, headers: dict[str, str]):
    body = json.dumps({"connectFour": {"moves": MOVES}, "agents": ["AGENT_CHECKER"]}).encode()
    headers = {"Content-Type": "application/json", **headers}

    def call() -> None:
        connection.request("POST", "/v1/problems:solve", body, headers)
        reply = connection.getresponse()
        text = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"REST {reply.status}: {text[:300]!r}")

    return call


def _percentiles(samples_s: list[float]) -> tuple[float, float]:
    values = np.asarray(samples_s) * 1e3
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def run(requests: int, warmup: int, on_env: dict[str, str], api_key: str | None,
        sample_ratio: float = 1.0) -> dict:
    collector = subprocess.Popen([sys.executable, __file__, "--collector"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
    collector_port = int(collector.stdout.readline())
    run_dir = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    servers = {
        "off": _start_orchestrator("off", {"ORCHESTRATOR_METRICS_PORT": "-1"}, run_dir),
        "on": _start_orchestrator("on", {
            "ORCHESTRATOR_METRICS_PORT": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}",
            "ORCHESTRATOR_TRACE_SAMPLE_RATIO": str(sample_ratio), **on_env}, run_dir),
    }
    request = pb.SolveProblemRequest(connect_four={"moves": MOVES}, agents=[pb.AGENT_CHECKER])
    channels, clients, calls = [], [], {}
    try:
        for features, (_, ports) in servers.items():
            metadata = (("x-api-key", api_key),) if api_key and features == "on" else ()
            headers = {"x-api-key": api_key} if api_key and features == "on" else {}
            channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}")
            channels.append(channel)
            stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
            calls[("grpc", features)] = _grpc_call(stub, request, metadata)
            client = http.client.HTTPConnection("127.0.0.1", ports["rest"], timeout=30)
            clients.append(client)
            calls[("rest", features)] = _rest_call(client, headers)
        keys = list(calls)
        for _ in range(warmup):
            for key in keys:
                calls[key]()
        samples: dict[tuple[str, str], list[float]] = {key: [] for key in keys}
        rng = random.Random(0)
        for _ in range(requests):
            rng.shuffle(keys)
            for key in keys:
                started = time.perf_counter()
                calls[key]()
                samples[key].append(time.perf_counter() - started)
        time.sleep(1.5)  # the last span batch (schedule delay 0.5 s)
        collector.stdin.close()
        spans_received = int(collector.stdout.readline())
        stats = {f"{transport}/{features}": dict(zip(("p50_ms", "p99_ms"), _percentiles(values),
                                                     strict=True))
                 for (transport, features), values in samples.items()}
        return {"requests": requests, "sample_ratio": sample_ratio,
                "spans_received": spans_received, "stats": stats,
                "on_env": sorted(on_env), "api_key": bool(api_key)}
    finally:
        for channel in channels:
            channel.close()
        for client in clients:
            client.close()
        for process, _ in servers.values():
            process.terminate()
        for process, _ in servers.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        if collector.poll() is None:
            collector.kill()


def print_table(result: dict) -> None:
    stats = result["stats"]
    print(f"SolveProblem (checker, end-game Connect Four), {result['requests']} requests per cell, "
          f"interleaved; trace sample ratio {result['sample_ratio']}, spans received by the "
          f"collector: {result['spans_received']}")
    print(f"{'transport':<10}{'off p50':>10}{'off p99':>10}{'on p50':>10}{'on p99':>10}"
          f"{'Δ p50':>10}{'Δ p99':>10}{'on/off p50':>12}")
    for transport in ("grpc", "rest"):
        off, on = stats[f"{transport}/off"], stats[f"{transport}/on"]
        print(f"{transport:<10}{off['p50_ms']:>10.3f}{off['p99_ms']:>10.3f}{on['p50_ms']:>10.3f}"
              f"{on['p99_ms']:>10.3f}{on['p50_ms'] - off['p50_ms']:>+10.3f}"
              f"{on['p99_ms'] - off['p99_ms']:>+10.3f}{on['p50_ms'] / off['p50_ms']:>12.2f}")
    print("REST front's own cost (REST - gRPC, same server):")
    for features in ("off", "on"):
        rest, grpc_ = stats[f"rest/{features}"], stats[f"grpc/{features}"]
        print(f"  features {features:<4} p50 {rest['p50_ms'] - grpc_['p50_ms']:+.3f} ms "
              f"({rest['p50_ms'] / grpc_['p50_ms']:.2f}x)   "
              f"p99 {rest['p99_ms'] - grpc_['p99_ms']:+.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000, help="timed requests per cell")
    parser.add_argument("--warmup", type=int, default=50, help="untimed requests per cell first")
    parser.add_argument("--on-env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra setting of the 'on' orchestrator (API keys, rate limits)")
    parser.add_argument("--api-key", default=None,
                        help="sent as x-api-key to the 'on' orchestrator (gRPC and REST)")
    parser.add_argument("--sample-ratio", type=float, default=1.0,
                        help="ORCHESTRATOR_TRACE_SAMPLE_RATIO of the 'on' orchestrator")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--collector", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.warmup = 20, 5
    if args.collector:
        _serve_collector()
        return
    on_env = dict(item.split("=", 1) for item in args.on_env)
    result = run(args.requests, args.warmup, on_env, args.api_key, args.sample_ratio)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
