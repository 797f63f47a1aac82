"""Issue 29's "Measured" table: what API keys, scopes, budgets and mesh authentication cost the
README's requests, before and after, over gRPC and REST, and ingest throughput before and after.

Two whole meshes run at once, each from its own checkout: "before" (`--before DIR`, or by default
a `git archive` of `--before-ref`) and "after" (`--after DIR`, by default this checkout). Each is
started by its checkout's own `mcts_mesh.launcher.start_mesh` in a child process (that checkout
first on the import path, free loopback ports, the offline LLM provider, a temporary retrieval
store, this checkout's int8 encoder file for both), with the settings of the tables below: API
keys required on both sides (a key made by that checkout's own `mcts-mesh keys create`); on the
after side also the key's scopes, budgets and cap in flight, and the mesh token on every hop.
Before measuring, each side is probed: a call without a key must be UNAUTHENTICATED; on the after
side a call to a backend without the mesh token must be UNAUTHENTICATED, and a probe key with only
the `solve` scope and a one-simulation budget must get PERMISSION_DENIED for AnswerQuery and
RESOURCE_EXHAUSTED for its second solve (the table says what was found, so a mis-set name shows).

Requests (the README's): SolveProblem `{"connectFour": {"moves": "4453"}}` (default agents and
budgets), and AnswerQuery `{"query": CLAIM, "collection": ..., "searchMode": "SEARCH_MODE_HYBRID"}`
over `--documents` SciFact abstracts ingested first (claims taken in turn). Each over gRPC (one
kept-alive channel) and REST (one kept-alive HTTP/1.1 connection). Every request goes to both
sides back to back, which side first alternating, so drift on the shared machine falls on both
alike; p50/p99 are over `--rounds` x `--requests` requests per cell, and the services' CPU time
(all five, from /proc) per request is given too: on a busy machine it moves much less than the
latency. Ingest: `--ingest-repeats` times per side (alternating), the same abstracts into a fresh
collection through the orchestrator's IngestDocuments; chunks/s from the response's chunk count.

    .venv/bin/python bench/hardening.py [--before DIR | --before-ref REF] [--after DIR]
        [--rounds 20] [--requests 25] [--documents 200] [--ingest-repeats 3] [--quick] [--json]

(`--quick`: 2 rounds of 3 requests, 20 abstracts, one ingest each; a check that it runs.)
The target (issue 29): p50 at most +0.3 ms over before; ingest no more than 5% slower.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import grpc
from google.protobuf import json_format
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb
from mesh.retrieval.v1 import retrieval_service_pb2_grpc
from procstat import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from libs.data import dataset  # noqa: E402

# --- what each side runs with (names the integrator may need to adjust) ------------------------
BEFORE_REF = "fdc759d"
"""The commit before issue 29's work."""
HIGH = "1000000000000"
"""A budget no run reaches: what is measured is the cost of checking and charging it."""
SIDE_ENV = {
    # Both sides: keys required, the key file made below, the offline LLM provider.
    "both": {"ORCHESTRATOR_REQUIRE_API_KEY": "true",
             "ORCHESTRATOR_API_KEYS_FILE": "{keys_file}",
             "LLM_FALLBACK_ORDER": '["offline"]',
             "RETRIEVAL_DATA_DIR": "{work}/retrieval",
             "RETRIEVAL_ONNX_PATH": "{onnx}"},
    # After only: budgets and the per-key cap as deployment defaults, the mesh token on every hop.
    "after": {"ORCHESTRATOR_BUDGET_TOKENS": HIGH,
              "ORCHESTRATOR_BUDGET_USD": HIGH,
              "ORCHESTRATOR_BUDGET_SIMULATIONS": HIGH,
              "ORCHESTRATOR_MAX_IN_FLIGHT_PER_KEY": "32",
              **{f"{prefix}MESH_TOKEN": "{token}"
                 for prefix in ("MCTS_", "NEURAL_", "RETRIEVAL_", "LLM_", "ORCHESTRATOR_")}},
}
KEY_ARGS = {
    # `mcts-mesh keys --file FILE create NAME ...` for the measured key; the after side's key
    # also gets `--collection` for each collection the bench uses.
    "before": [],
    "after": ["--scope", "solve", "--scope", "query", "--scope", "ingest",
              "--budget-tokens", HIGH, "--budget-usd", HIGH, "--budget-simulations", HIGH,
              "--max-in-flight", "32"],
}
PROBE_KEY_ARGS = ["--scope", "solve", "--budget-simulations", "1"]
"""The after side's probe key: no `query` scope, a budget its first solve uses up."""
API_KEY_HEADER = "x-api-key"
MESH_TOKEN_HEADER = "x-mesh-token"  # only to show that a call without it is refused

# --- the requests -------------------------------------------------------------------------------
SOLVE = {"connectFour": {"moves": "4453"}}
"""README's first example request."""
QUERY_COLLECTION = "bench-hardening"
INGEST_COLLECTION = "bench-hardening-ingest-{}"
SIDES = ("before", "after")
WORKLOADS = ("connect4", "query")
TRANSPORTS = ("gRPC", "REST")
RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import libs
    from mcts_mesh.launcher import start_mesh
    mesh = start_mesh(port_base=0, rest_port=0, log_dir=Path(sys.argv[1]), ready_timeout_s=600)
    print("BENCH-MESH " + json.dumps({
        "ports": mesh.ports, "rest": mesh.rest_port, "code": str(Path(libs.__file__).parent),
        "pids": {name: p.pid for name, p in mesh.processes.items()}}), flush=True)
    sys.stdin.read()
    mesh.stop()
""")


def _run_env(code: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{code}:{code / 'libs' / 'stubs'}", **(extra or {})}


def before_checkout(args, work: Path) -> Path:
    """`--before`, or `git archive` of `--before-ref` extracted under `work`."""
    if args.before:
        return Path(args.before).resolve()
    code = work / "before-code"
    code.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before_ref],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    return code


def make_key(code: Path, keys_file: Path, name: str, extra: list[str]) -> str:
    """A new key from `code`'s own `mcts-mesh keys create` (the key file format is its own)."""
    made = subprocess.run([sys.executable, "-m", "mcts_mesh.cli", "keys", "--file",
                           str(keys_file), "create", name, *extra], cwd=code,
                          env=_run_env(code), capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        raise RuntimeError(f"keys create in {code} failed: {made.stderr.strip()}")
    return made.stdout.strip().splitlines()[0]


def side_env(side: str, work: Path, token: str) -> dict[str, str]:
    values = {"keys_file": str(work / "keys.json"), "work": str(work), "token": token,
              "onnx": str(ROOT / "var" / "embedder" / "all-MiniLM-L6-v2-int8.onnx")}
    table = {**SIDE_ENV["both"], **(SIDE_ENV["after"] if side == "after" else {})}
    return {name: value.format(**values) for name, value in table.items()}


def start_side(code: Path, env: dict[str, str], work: Path) -> subprocess.Popen:
    log = (work / "runner.log").open("w")
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(work / "logs")], cwd=code,
                            env=_run_env(code, env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)


def wait_side(process: subprocess.Popen, work: Path) -> dict:
    """The runner's ports line; RuntimeError (with its log's tail) when it ends without one."""
    for line in process.stdout:
        if line.startswith("BENCH-MESH "):
            return json.loads(line.split(" ", 1)[1])
    tail = (work / "runner.log").read_text()[-2000:]
    raise RuntimeError(f"the mesh in {work} did not start: {tail}")


def stop_side(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.stdin.close()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Client:
    """The orchestrator of one side over one transport, with the side's API key."""

    def __init__(self, transport: str, mesh: dict, key: str) -> None:
        self.transport = transport
        self._metadata = [(API_KEY_HEADER, key)]
        self._headers = {"Content-Type": "application/json", API_KEY_HEADER: key}
        self._channel = grpc.insecure_channel(f"127.0.0.1:{mesh['ports']['orchestrator']}")
        self._stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(self._channel)
        self._http = http.client.HTTPConnection("127.0.0.1", mesh["rest"], timeout=120)

    def prepare(self, workload: str, body: dict):
        """The request ready to send (built outside the timed part)."""
        if self.transport == "REST":
            return json.dumps(body).encode()
        kind = pb.SolveProblemRequest if workload == "connect4" else pb.AnswerQueryRequest
        return json_format.ParseDict(body, kind())

    def call(self, workload: str, request) -> None:
        """Sends one prepared request; AssertionError when it is not answered (HTTP 200, a
        column, sources)."""
        if self.transport == "gRPC":
            if workload == "connect4":
                reply = self._stub.SolveProblem(request, metadata=self._metadata, timeout=120)
                assert 1 <= reply.connect_four.column <= 7, reply
            else:
                reply = self._stub.AnswerQuery(request, metadata=self._metadata, timeout=120)
                assert reply.sources, reply
            return
        path = "/v1/problems:solve" if workload == "connect4" else "/v1/queries:answer"
        self._http.request("POST", path, request, self._headers)
        response = self._http.getresponse()
        payload = response.read()
        assert response.status == 200, (response.status, payload[:300])

    def close(self) -> None:
        self._channel.close()
        self._http.close()


def _code_of(call) -> str:
    try:
        call()
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def probe(side: str, mesh: dict, probe_key: str | None) -> dict[str, str]:
    """What the side does with a keyless call, a tokenless backend call and the probe key."""
    found = {}
    with grpc.insecure_channel(f"127.0.0.1:{mesh['ports']['orchestrator']}") as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        solve = json_format.ParseDict(SOLVE, pb.SolveProblemRequest())
        found["no key"] = _code_of(lambda: stub.SolveProblem(solve, timeout=120))
        if probe_key is not None:
            metadata = [(API_KEY_HEADER, probe_key)]
            query = pb.AnswerQueryRequest(query="heart", collection=QUERY_COLLECTION)
            found["probe key, AnswerQuery (no query scope)"] = _code_of(
                lambda: stub.AnswerQuery(query, metadata=metadata, timeout=120))
            found["probe key, 1st solve"] = _code_of(
                lambda: stub.SolveProblem(solve, metadata=metadata, timeout=120))
            found["probe key, 2nd solve (budget spent)"] = _code_of(
                lambda: stub.SolveProblem(solve, metadata=metadata, timeout=120))
    with grpc.insecure_channel(f"127.0.0.1:{mesh['ports']['retrieval']}") as channel:
        retrieval = retrieval_service_pb2_grpc.RetrievalServiceStub(channel)
        found["retrieval, no mesh token"] = _code_of(
            lambda: retrieval.ListCollections(rpb.ListCollectionsRequest(), timeout=30))
    return found


def scifact(documents: int) -> tuple[list[common_pb2.Document], list[str]]:
    root = dataset("beir-scifact")
    docs = []
    with (root / "corpus.jsonl").open() as lines:
        for line in lines:
            row = json.loads(line)
            docs.append(common_pb2.Document(id=row["_id"], title=row.get("title", ""),
                                            text=row["text"], source="scifact"))
            if len(docs) >= documents:
                break
    with (root / "queries.jsonl").open() as lines:
        claims = [json.loads(line)["text"] for line in lines]
    return docs, claims


def ingest(mesh: dict, key: str, collection: str, docs) -> tuple[int, float]:
    """(chunks written, seconds) of one IngestDocuments through the orchestrator."""
    with grpc.insecure_channel(f"127.0.0.1:{mesh['ports']['orchestrator']}") as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        started = time.perf_counter()
        reply = stub.IngestDocuments(pb.IngestDocumentsRequest(collection=collection,
                                                               documents=docs),
                                     metadata=[(API_KEY_HEADER, key)], timeout=1800)
        return reply.chunk_count, time.perf_counter() - started


def bodies(workload: str, index: int, claims: list[str]) -> dict:
    if workload == "connect4":
        return SOLVE
    return {"query": claims[index % len(claims)], "collection": QUERY_COLLECTION,
            "searchMode": "SEARCH_MODE_HYBRID"}


def measure(args, meshes: dict, keys: dict, claims: list[str]) -> tuple[dict, dict]:
    """Latencies (ms) and service CPU (ms) per (workload, transport, side)."""
    clients = {(t, s): Client(t, meshes[s], keys[s]) for t in TRANSPORTS for s in SIDES}
    pids = {s: list(meshes[s]["pids"].values()) for s in SIDES}
    latency = {(w, t, s): [] for w in WORKLOADS for t in TRANSPORTS for s in SIDES}
    cpu = dict.fromkeys(latency, 0.0)
    try:
        for client in clients.values():  # warm-up, not recorded
            for workload in WORKLOADS:
                for index in range(3):
                    client.call(workload, client.prepare(workload, bodies(workload, index,
                                                                          claims)))
        for index in range(args.rounds * args.requests):
            order = SIDES if index % 2 == 0 else SIDES[::-1]  # who goes first alternates
            for workload in WORKLOADS:
                for transport in TRANSPORTS:
                    for side in order:
                        client = clients[(transport, side)]
                        request = client.prepare(workload, bodies(workload, index, claims))
                        cpu_before = sum(cpu_seconds(pid) for pid in pids[side])
                        started = time.perf_counter()
                        client.call(workload, request)
                        latency[(workload, transport, side)].append(
                            (time.perf_counter() - started) * 1e3)
                        cpu[(workload, transport, side)] += (
                            sum(cpu_seconds(pid) for pid in pids[side]) - cpu_before) * 1e3
    finally:
        for client in clients.values():
            client.close()
    return latency, cpu


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rows_of(latency: dict, cpu: dict) -> list[dict]:
    rows = []
    for workload in WORKLOADS:
        for transport in TRANSPORTS:
            row = {"request": workload, "transport": transport}
            for side in SIDES:
                values = latency[(workload, transport, side)]
                row[f"{side}_p50_ms"] = statistics.median(values)
                row[f"{side}_p99_ms"] = percentile(values, 0.99)
                row[f"{side}_cpu_ms"] = cpu[(workload, transport, side)] / len(values)
                row["requests"] = len(values)
            row["added_p50_ms"] = row["after_p50_ms"] - row["before_p50_ms"]
            for what in ("p50_ms", "p99_ms", "cpu_ms"):
                row[f"ratio_{what[:-3]}"] = row[f"after_{what}"] / row[f"before_{what}"]
            rows.append(row)
    return rows


def print_report(rows: list[dict], ingest_rows: dict, probes: dict, load: tuple,
                 meshes: dict) -> None:
    print(f"# before: {meshes['before']['code']}  after: {meshes['after']['code']}")
    print(f"# 1-min load average {load[0]:.2f} before the requests, {load[1]:.2f} after, "
          f"{os.cpu_count()} CPUs")
    for side in SIDES:
        print(f"# {side} probes: " + "; ".join(f"{k}: {v}" for k, v in probes[side].items()))
    print()
    print("| request | transport | n | before p50 ms | after p50 ms | +p50 ms | after/before "
          "p50 | before p99 ms | after p99 ms | after/before p99 | CPU ms/req before | after "
          "| after/before CPU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['request']} | {r['transport']} | {r['requests']} | {r['before_p50_ms']:.2f} "
              f"| {r['after_p50_ms']:.2f} | {r['added_p50_ms']:+.2f} | {r['ratio_p50']:.3f} "
              f"| {r['before_p99_ms']:.2f} | {r['after_p99_ms']:.2f} | {r['ratio_p99']:.3f} "
              f"| {r['before_cpu_ms']:.2f} | {r['after_cpu_ms']:.2f} | {r['ratio_cpu']:.3f} |")
    print()
    rates = {side: [c / s for c, s in ingest_rows[side]] for side in SIDES}
    medians = {side: statistics.median(rates[side]) for side in SIDES}
    print("| ingest | runs | chunks | before chunks/s | after chunks/s | after/before |")
    print("|---|---|---|---|---|---|")
    print(f"| IngestDocuments (gRPC) | {len(rates['before'])} | {ingest_rows['after'][0][0]} "
          f"| {medians['before']:.1f} | {medians['after']:.1f} "
          f"| {medians['after'] / medians['before']:.3f} |")


def run(args, work: Path) -> dict:
    codes = {"before": before_checkout(args, work), "after": Path(args.after).resolve()}
    token = secrets.token_urlsafe(32)
    docs, claims = scifact(args.documents)
    collections = [QUERY_COLLECTION] + [INGEST_COLLECTION.format(i)
                                        for i in range(args.ingest_repeats)]
    keys, probe_keys, runners, meshes = {}, {}, {}, {}
    for side in SIDES:
        (work / side).mkdir()
        extra = KEY_ARGS[side] + [a for c in collections for a in ("--collection", c)
                                  if side == "after"]
        keys[side] = make_key(codes[side], work / side / "keys.json", "bench", extra)
        if side == "after":
            probe_keys[side] = make_key(codes[side], work / side / "keys.json", "probe",
                                        PROBE_KEY_ARGS)
        runners[side] = start_side(codes[side], side_env(side, work / side, token), work / side)
    try:
        for side in SIDES:
            meshes[side] = wait_side(runners[side], work / side)
            print(f"# {side}: mesh up from {meshes[side]['code']}", file=sys.stderr, flush=True)
        for side in SIDES:
            ingest(meshes[side], keys[side], QUERY_COLLECTION, docs)
        probes = {side: probe(side, meshes[side], probe_keys.get(side)) for side in SIDES}
        ingest_rows = {side: [] for side in SIDES}
        for repeat in range(args.ingest_repeats):
            order = SIDES if repeat % 2 == 0 else SIDES[::-1]
            for side in order:
                ingest_rows[side].append(ingest(meshes[side], keys[side],
                                                INGEST_COLLECTION.format(repeat), docs))
        load_before = os.getloadavg()[0]
        latency, cpu = measure(args, meshes, keys, claims)
        load = (load_before, os.getloadavg()[0])
    finally:
        for runner in runners.values():
            stop_side(runner)
    rows = rows_of(latency, cpu)
    print_report(rows, ingest_rows, probes, load, meshes)
    return {"rows": rows, "ingest": ingest_rows, "probes": probes, "load_average": load,
            "before": str(codes["before"]), "after": str(codes["after"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="checkout directory of the before side")
    parser.add_argument("--before-ref", default=BEFORE_REF,
                        help="commit archived for the before side when --before is not given")
    parser.add_argument("--after", default=str(ROOT), help="checkout directory of the after side")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--requests", type=int, default=25, help="per round, cell and side")
    parser.add_argument("--documents", type=int, default=200, help="SciFact abstracts ingested")
    parser.add_argument("--ingest-repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a short run that checks it works")
    parser.add_argument("--json", action="store_true", help="also print one JSON object")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests, args.documents, args.ingest_repeats = 2, 3, 20, 1
    with tempfile.TemporaryDirectory(prefix="bench-hardening-") as temporary:
        result = run(args, Path(temporary))
    if args.json:
        print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
