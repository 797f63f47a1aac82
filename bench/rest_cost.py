"""The REST front's own cost over gRPC: the same SolveProblem request sent many times over one
kept-alive connection, straight to the orchestrator's gRPC port and through its REST front, with
p50/p99 per request and what REST adds.

The server is the real orchestrator servicer (checker agent only, on a position it answers at
once, so the request's own work is small and the front's cost shows) in a separate process, with
its REST front; a second server process serves the same app from a listening socket created with
protocol 0, as the front did before it set TCP_NODELAY (asyncio then leaves Nagle's algorithm on
for every accepted connection), as the in-run baseline. Rounds alternate between the three paths so
that the machine's drift hits them alike.

    .venv/bin/python bench/rest_cost.py [--requests N] [--rounds R] [--json]

(defaults: 30 rounds of 50 requests per path, 1,500 in all per path; about 90 s)

Run it against another checkout (e.g. main, to compare before/after) with that checkout first on
the import path: PYTHONPATH=/work/main:/work/main/libs/stubs .venv/bin/python bench/rest_cost.py
(the "REST" row then measures that checkout's front; checkouts from the in-process front on, where
`build_rest_app` takes `RunningServer.in_process`; run an older checkout's own copy of this file).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

REQUEST = {"connectFour": {"moves": "121212"}, "agents": ["AGENT_CHECKER"]}
"""Player one to move with three in column 1: the checker answers "1" at once."""


async def _serve(nagle: bool) -> None:
    import uvicorn

    from libs.rest import RestSettings, serve_rest
    from libs.server import start_server
    from services.orchestrator.api.rest import build_rest_app
    from services.orchestrator.main import Wiring, build_servicers
    from services.orchestrator.settings import OrchestratorSettings

    settings = OrchestratorSettings(port=0, rest_port=-1)
    wiring = Wiring(settings)
    servicers, ready = await build_servicers(settings, wiring)
    grpc_server = await start_server("orchestrator", settings, servicers, ready)
    app = build_rest_app(grpc_server.in_process, RestSettings(port=0))
    if nagle:  # the front before: a listening socket of protocol 0
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning",
                                               access_log=False))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        rest_port = sock.getsockname()[1]
    else:
        rest = await serve_rest(app, "127.0.0.1", 0)
        rest_port = rest.port
    print(json.dumps({"grpc": grpc_server.port, "rest": rest_port}), flush=True)
    await asyncio.to_thread(sys.stdin.read)  # until the parent closes our stdin
    if nagle:
        server.should_exit = True
        await task
    else:
        await rest.stop()
    await grpc_server.stop(0)
    await wiring.aclose()


def _start(nagle: bool) -> tuple[subprocess.Popen, dict[str, int]]:
    args = [sys.executable, __file__, "--serve"] + (["--nagle"] if nagle else [])
    process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line:
        raise RuntimeError("the server process did not start")
    return process, json.loads(line)


class _Grpc:
    def __init__(self, port: int) -> None:
        import grpc
        from google.protobuf import json_format
        from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
        from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(self._channel)
        self._request = json_format.ParseDict(REQUEST, pb.SolveProblemRequest())

    def call(self) -> None:
        reply = self._stub.SolveProblem(self._request, timeout=10)
        assert reply.connect_four.column == 1

    def close(self) -> None:
        self._channel.close()


class _Rest:
    def __init__(self, port: int) -> None:
        # http.client sets TCP_NODELAY on its own socket, so only the server's side is measured
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self._body = json.dumps(REQUEST).encode()
        self._headers = {"Content-Type": "application/json"}

    def call(self) -> None:
        self._connection.request("POST", "/v1/problems:solve", self._body, self._headers)
        reply = self._connection.getresponse()
        body = reply.read()
        assert reply.status == 200 and json.loads(body)["connectFour"]["column"] == 1, body

    def close(self) -> None:
        self._connection.close()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50,
                        help="per path and round (a round on the Nagle path takes ~48 ms per "
                             "request, and the others' connections must not sit idle past "
                             "uvicorn's 5 s keep-alive timeout meanwhile)")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nagle", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds = 10, 2
    if args.serve:
        asyncio.run(_serve(args.nagle))
        return
    load_before = os.getloadavg()[0]
    front, front_ports = _start(nagle=False)
    before, before_ports = _start(nagle=True)
    clients = {"gRPC": _Grpc(front_ports["grpc"]), "REST": _Rest(front_ports["rest"]),
               "REST, Nagle (before)": _Rest(before_ports["rest"])}
    latencies: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for client in clients.values():  # warm-up, not recorded
            for _ in range(20):
                client.call()
        for _ in range(args.rounds):
            for name, client in clients.items():
                for _ in range(args.requests):
                    started = time.perf_counter()
                    client.call()
                    latencies[name].append((time.perf_counter() - started) * 1e3)
    finally:
        for client in clients.values():
            client.close()
        for process in (front, before):
            process.stdin.close()
            process.wait(timeout=30)
    base_p50 = statistics.median(latencies["gRPC"])
    base_p99 = _percentile(latencies["gRPC"], 0.99)
    rows = []
    for name, values in latencies.items():
        p50, p99 = statistics.median(values), _percentile(values, 0.99)
        rows.append({"path": name, "requests": len(values), "p50_ms": round(p50, 3),
                     "p99_ms": round(p99, 3), "added_p50_ms": round(p50 - base_p50, 3),
                     "added_p99_ms": round(p99 - base_p99, 3),
                     "p50_ratio": round(p50 / base_p50, 2)})
    load = (round(load_before, 2), round(os.getloadavg()[0], 2))
    if args.json:
        print(json.dumps({"rows": rows, "load_average_1min": load}))
        return
    print(f"SolveProblem {json.dumps(REQUEST)}, one kept-alive connection per path, "
          f"{args.rounds} rounds x {args.requests} requests; 1-min load average {load[0]} before, "
          f"{load[1]} after, on {os.cpu_count()} CPUs")
    print(f"{'path':<22}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>10}{'+p99 ms':>10}{'x gRPC':>8}")
    for row in rows:
        print(f"{row['path']:<22}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}"
              f"{row['added_p50_ms']:>+10.3f}{row['added_p99_ms']:>+10.3f}{row['p50_ratio']:>8.2f}")


if __name__ == "__main__":
    main()
