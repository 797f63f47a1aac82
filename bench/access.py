"""What the orchestrator's access control (API key, rate limits, admission) adds to a gRPC call.

In one process, interleaved in rounds: the same grpc.aio server (libs.server.start_server, with an
OrchestratorService whose SolveProblem answers at once) without access control (the baseline), with
admission control only (`mcts-mesh up`'s default), with a required key and in-memory limits, and,
when `redis-server` is installed, with a required key and limits in a real Redis on loopback (one
round trip per call). The client sends one call at a time over a kept-alive channel; p50 and p99
are over every call of every round. Limits are set high enough that no call is refused: what is
measured is the cost of checking. A second table times the decision alone (credential parsing,
key lookup, admission, in-memory limits, release) in a loop, best of 5: on a busy machine it
resolves what the per-call percentiles cannot.

    .venv/bin/python bench/access.py [--calls 4000] [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc as pb_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from libs.server import Servicer, start_server  # noqa: E402
from services.orchestrator.access import open_access  # noqa: E402
from services.orchestrator.access.control import credential_from_metadata  # noqa: E402
from services.orchestrator.access.interceptor import AccessInterceptor  # noqa: E402
from services.orchestrator.access.keys import FileKeyStore  # noqa: E402
from services.orchestrator.settings import OrchestratorSettings  # noqa: E402

SERVICE = "mesh.orchestrator.v1.OrchestratorService"
REQUEST = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="44"))
HIGH = 1_000_000_000


class _Echo(pb_grpc.OrchestratorServiceServicer):
    async def SolveProblem(self, request, context):
        return pb.SolveProblemResponse(connect_four=pb.ConnectFourAnswer(column=4))


def _redis(tmp: Path) -> tuple[subprocess.Popen, str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    process.kill()
    return None


async def _start(settings: OrchestratorSettings | None):
    control = await open_access(settings) if settings is not None else None
    server = await start_server(
        "orchestrator", OrchestratorSettings(port=0, rest_port=-1),
        [Servicer(pb_grpc.add_OrchestratorServiceServicer_to_server, _Echo(), SERVICE)],
        interceptors=[AccessInterceptor(control)] if control is not None else ())
    return server, control


async def _time_calls(stub, metadata, calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        await stub.SolveProblem(REQUEST, metadata=metadata, timeout=10)
        out.append((time.perf_counter() - started) * 1e3)
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _decision_us(control, metadata, loops: int = 20_000) -> float:
    """Microseconds of one admit + release, best of 5 loops."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(loops):
            if await control.admit(credential_from_metadata(metadata)) is None:
                control.release()
        best = min(best, (time.perf_counter() - started) / loops * 1e6)
    return best


async def main(calls: int, rounds: int, as_json: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-access-"))
    keys = FileKeyStore(tmp / "api-keys.json")
    key = await keys.create("bench")
    metadata = (("x-api-key", key),)
    limits = dict(rate_limit_per_second=HIGH, rate_limit_per_minute=HIGH,
                  rate_limit_per_hour=HIGH, max_in_flight=HIGH)
    configs: dict[str, tuple[OrchestratorSettings | None, tuple]] = {
        "off (baseline)": (None, metadata),
        "admission only (default)": (OrchestratorSettings(), ()),
        "key + limits in memory": (OrchestratorSettings(
            require_api_key=True, api_keys_file=str(keys.path), **limits), metadata),
    }
    redis = _redis(tmp)
    if redis is not None:
        configs["key + limits in Redis"] = (OrchestratorSettings(
            require_api_key=True, api_keys_file=str(keys.path), redis_url=redis[1], **limits),
            metadata)
    started = {name: await _start(settings) for name, (settings, _) in configs.items()}
    channels = {name: grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
                for name, (server, _) in started.items()}
    stubs = {name: pb_grpc.OrchestratorServiceStub(channel) for name, channel in channels.items()}
    latencies: dict[str, list[float]] = {name: [] for name in configs}
    decisions = {}
    try:
        for name, (_server, control) in started.items():
            if control is not None and "Redis" not in name:
                decisions[name] = round(await _decision_us(control, configs[name][1]), 2)
        for name in configs:  # warm-up, unrecorded
            await _time_calls(stubs[name], configs[name][1], 300)
        for _ in range(rounds):
            for name in configs:
                latencies[name] += await _time_calls(stubs[name], configs[name][1],
                                                     calls // rounds)
    finally:
        for channel in channels.values():
            await channel.close()
        for server, control in started.values():
            await server.stop(0)
            if control is not None:
                await control.aclose()
        if redis is not None:
            redis[0].terminate()
            redis[0].wait(10)
    base50 = _percentile(latencies["off (baseline)"], 0.5)
    base99 = _percentile(latencies["off (baseline)"], 0.99)
    rows = []
    for name, values in latencies.items():
        p50, p99 = _percentile(values, 0.5), _percentile(values, 0.99)
        rows.append({"config": name, "calls": len(values), "p50_ms": round(p50, 3),
                     "p99_ms": round(p99, 3), "added_p50_ms": round(p50 - base50, 3),
                     "added_p99_ms": round(p99 - base99, 3), "p50_ratio": round(p50 / base50, 3)})
    if as_json:
        print(json.dumps({"calls": rows, "decision_us": decisions}, indent=2))
        return
    print(f"{'config':<28} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} "
          f"{'+p99 ms':>8} {'x p50':>6}")
    for row in rows:
        print(f"{row['config']:<28} {row['calls']:>6} {row['p50_ms']:>8.3f} {row['p99_ms']:>8.3f} "
              f"{row['added_p50_ms']:>+8.3f} {row['added_p99_ms']:>+8.3f} {row['p50_ratio']:>6.2f}")
    if redis is None:
        print("(redis-server not installed: the Redis row is missing)")
    print()
    print(f"{'decision alone (admit + release)':<36} {'us/call':>8}")
    for name, micros in decisions.items():
        print(f"{name:<36} {micros:>8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=4000, help="timed calls per config")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.rounds = 50, 1
    asyncio.run(main(args.calls, args.rounds, args.json))
