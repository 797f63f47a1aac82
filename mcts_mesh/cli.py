"""`mcts-mesh`: the one command line of the project.

`up` and `serve` run services; `train` runs a training job; `puzzles` writes puzzle files; every
other command is a client of the orchestrator's public gRPC API (`--target`), never an in-process
shortcut.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import grpc

from libs.data import MissingDataset, evaluation_dir
from mcts_mesh.client import API_KEY_ENV

DEFAULT_TARGET = "127.0.0.1:50051"
AGENT_NAMES = ("mcts", "neural", "checker", "retrieval", "llm", "solver", "hrm", "trm")

# service word -> (settings class, entry-point module)
SERVICE_ENTRY = {
    "mcts": ("services.mcts.settings:MctsSettings", "services.mcts.main"),
    "neural": ("services.neural.settings:NeuralSettings", "services.neural.main"),
    "retrieval": ("services.retrieval.settings:RetrievalSettings", "services.retrieval.main"),
    "llm": ("services.llm.settings:LlmSettings", "services.llm.main"),
    "orchestrator": ("services.orchestrator.settings:OrchestratorSettings",
                     "services.orchestrator.main"),
}


def _import(path: str):
    module, _, attribute = path.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, attribute) if attribute else loaded


def _agents(text: str | None) -> list[int]:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    if not text:
        return []
    agents = []
    for name in text.split(","):
        name = name.strip().lower()
        if name not in AGENT_NAMES:
            raise SystemExit(
                f"--agents: unknown agent {name!r}; choose from {', '.join(AGENT_NAMES)}")
        agents.append(pb.Agent.Value(f"AGENT_{name.upper()}"))
    return agents


def _agent_name(value: int) -> str:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    return pb.Agent.Name(value).removeprefix("AGENT_").lower()


def _fail(error: grpc.RpcError) -> int:
    """Prints a failed call the way a user reads it: code, message, field violations."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    print(f"error: {error.code().name}: {error.details()}", file=sys.stderr)
    status = rpc_status.from_call(error)
    if status is not None:
        for detail in status.details:
            bad = error_details_pb2.BadRequest()
            if detail.Unpack(bad):
                for violation in bad.field_violations:
                    print(f"  field {violation.field}: {violation.description}", file=sys.stderr)
    return 2


def _stub(target: str, api_key: str | None = None):
    from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

    from mcts_mesh.client import open_channel

    channel = open_channel(target, api_key)
    return channel, orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)


def _solve_request(moves: str, args) -> object:
    from mesh.common.v1 import common_pb2
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    request = pb.SolveProblemRequest(
        connect_four=common_pb2.ConnectFourPosition(moves=moves),
        agents=_agents(args.agents), seed=args.seed,
    )
    if args.simulations is not None:
        request.simulations = args.simulations
    return request


def _answer_record(moves: str, response, latency_ms: float) -> dict:
    answer = response.connect_four
    stats = response.search_statistics
    return {
        "moves": moves,
        "move": answer.column,
        "value": round(answer.value, 4),
        "outcome": _outcome_name(answer.outcome),
        "confidence": round(response.confidence, 4),
        "agents": [_agent_name(a) for a in response.agents],
        "votes": [{"agent": _agent_name(v.agent), "proposal": v.proposal,
                   "confidence": round(v.confidence, 4), "rationale": v.rationale}
                  for v in response.votes],
        "simulations": stats.simulations,
        "simulations_per_second": round(stats.simulations_per_second, 1),
        "iterations": response.iterations,
        "consensus": response.consensus_reached,
        "latency_ms": round(latency_ms, 2),
        "failures": _failure_records(response),
    }


def _failure_records(response) -> list[dict]:
    return [{"agent": _agent_name(f.agent), "code": f.code, "message": f.message}
            for f in response.failures]


def _outcome_name(value: int) -> str:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    return pb.Outcome.Name(value).removeprefix("OUTCOME_").lower()


def cmd_solve(args) -> int:
    from mcts_mesh import puzzle_commands

    channel, stub = _stub(args.target, args.api_key)
    if args.progress:  # the same answer, through StreamSolveProblem, with the loop shown live
        from rich.console import Console

        from mcts_mesh.progress import StreamingSolveStub

        stub = StreamingSolveStub(stub, Console(stderr=True))
    started = time.perf_counter()
    try:
        if args.game == "sudoku":
            return puzzle_commands.solve_sudoku(stub, args)
        if args.game == "maze":
            return puzzle_commands.solve_maze(stub, args)
        response = stub.SolveProblem(_solve_request(args.problem, args), timeout=args.deadline)
    except grpc.RpcError as error:
        return _fail(error)
    finally:
        channel.close()
    record = _answer_record(args.problem, response, (time.perf_counter() - started) * 1e3)
    if args.json:
        print(json.dumps(record))
    else:
        search = (f"{record['simulations']} simulations at "
                  f"{record['simulations_per_second']:.0f}/s, " if record["simulations"] else "")
        print(f"play column {record['move']}  (value {record['value']:+.3f}, outcome "
              f"{record['outcome']}, confidence {record['confidence']:.2f}, agents "
              f"{','.join(record['agents'])}, {search}{record['latency_ms']:.0f} ms)")
        for vote in record["votes"]:
            print(f"  {vote['agent']:>8}: {vote['proposal']:>2}  conf {vote['confidence']:.2f}  "
                  f"{vote['rationale']}")
        for failure in record["failures"]:
            print(f"  {failure['agent']:>8}: failed ({failure['code']}: {failure['message']})")
    return 0


def cmd_eval(args) -> int:
    """Sends every position of a Pons file to the orchestrator and judges the move it returns.

    A move keeps the outcome when the position after it has the same game-theoretic result for the
    player who moved as the position before it (the file's score); the judging uses the exact solver
    on this side, the answer comes only from the mesh.
    """
    from libs.connect4.outcome import keeps_outcome
    from libs.connect4.pons import read_pons

    if args.game in ("sudoku", "maze"):
        from mcts_mesh.puzzle_commands import eval_maze, eval_sudoku

        channel, stub = _stub(args.target, args.api_key)
        try:
            return (eval_sudoku if args.game == "sudoku" else eval_maze)(stub, args)
        finally:
            channel.close()
    from mcts_mesh.progress import eval_progress

    rows = read_pons(Path(args.file), args.limit)
    channel, stub = _stub(args.target, args.api_key)
    kept = 0
    latencies, rates = [], []
    progress_bar = contextlib.ExitStack()
    try:
        progress = progress_bar.enter_context(
            eval_progress(len(rows), Path(args.file).name, every=25, lines=not args.json))
        for index, (moves, score) in enumerate(rows, 1):
            started = time.perf_counter()
            try:
                response = stub.SolveProblem(_solve_request(moves, args), timeout=args.deadline)
            except grpc.RpcError as error:
                return _fail(error)
            latency_ms = (time.perf_counter() - started) * 1e3
            record = _answer_record(moves, response, latency_ms)
            record["score"] = score
            record["keeps_outcome"] = bool(keeps_outcome(moves, record["move"], score))
            kept += record["keeps_outcome"]
            latencies.append(latency_ms)
            if record["simulations_per_second"]:
                rates.append(record["simulations_per_second"])
            if args.json:
                print(json.dumps(record), flush=True)
            progress(index, f"kept {kept} ({kept / index:.1%})")
    finally:
        progress_bar.close()
        channel.close()
    latencies.sort()
    summary = {
        "summary": True,
        "file": str(args.file),
        "positions": len(rows),
        "kept": kept,
        "keeps_outcome_rate": round(kept / len(rows), 4) if rows else 0.0,
        "agents": args.agents or "all",
        "median_latency_ms": round(latencies[len(latencies) // 2], 2) if latencies else 0.0,
        "mean_simulations_per_second": round(sum(rates) / len(rates), 1) if rates else 0.0,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{Path(args.file).name}: {kept}/{len(rows)} moves keep the outcome "
              f"({summary['keeps_outcome_rate']:.1%}); median latency "
              f"{summary['median_latency_ms']:.0f} ms; MCTS "
              f"{summary['mean_simulations_per_second']:.0f} simulations/s")
    return 0


def cmd_ingest(args) -> int:
    """Reads and checks every document first (a bad file is reported before anything is stored),
    then streams them to OrchestratorService.StreamIngestDocuments with a progress bar (documents
    sent, total, ETA) on stderr."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
    from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from libs.errors import InvalidArgument
    from mcts_mesh.client import open_channel
    from services.retrieval.ingest import load_documents

    if not 1 <= args.batch_size <= 10_000:
        print(f"error: --batch-size {args.batch_size} is outside 1..10000", file=sys.stderr)
        return 2
    try:
        documents = load_documents([Path(p) for p in args.paths], limit=args.limit,
                                   max_document_chars=args.max_document_chars)
    except InvalidArgument as error:
        print(f"error: {error.description}", file=sys.stderr)
        print("nothing was ingested", file=sys.stderr)
        return 2
    if not documents:
        print("error: no documents found in the given paths", file=sys.stderr)
        return 2
    progress = Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("documents"), TimeElapsedColumn(), TextColumn("ETA"),
                        TimeRemainingColumn(), console=_stderr_console(),
                        disable=args.quiet)
    task = progress.add_task("ingest", total=len(documents))

    def messages():
        for begin in range(0, len(documents), args.batch_size):
            batch = documents[begin:begin + args.batch_size]
            yield pb.StreamIngestDocumentsRequest(collection=args.collection, documents=batch)
            progress.advance(task, len(batch))

    # No BDP probing: the flow-control window stays small, so the bar follows what retrieval has
    # taken in rather than what the socket buffered.
    channel = open_channel(args.target, args.api_key, extra_options=[("grpc.http2.bdp_probe", 0)])
    stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
    try:
        with progress:
            reply = stub.StreamIngestDocuments(messages(), timeout=args.deadline)
    except grpc.RpcError as error:
        return _fail(error)
    except KeyboardInterrupt:
        print("interrupted: documents stored before the interruption stay stored; a re-run "
              "skips them", file=sys.stderr)
        return 130
    finally:
        channel.close()
    print(f"ingested {reply.document_count} documents as {reply.chunk_count} chunks into "
          f"{args.collection!r} ({reply.updated_document_count} updated, "
          f"{reply.skipped_document_count} unchanged and skipped)")
    return 0


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def cmd_query(args) -> int:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    channel, stub = _stub(args.target, args.api_key)
    from mesh.common.v1 import common_pb2

    request = pb.AnswerQueryRequest(
        query=args.text, collection=args.collection,
        search_mode=common_pb2.SearchMode.Value(f"SEARCH_MODE_{args.mode.upper()}"),
        fusion=common_pb2.FusionMethod.Value(f"FUSION_METHOD_{args.fusion.upper()}"))
    if args.top_k is not None:
        request.top_k = args.top_k
    for field in ("sample_count", "temperature", "max_tokens", "max_cost_usd",
                  "mcts_iterations", "step_branching", "max_steps", "max_refinements"):
        if getattr(args, field) is not None:
            setattr(request, field, getattr(args, field))
    if args.role:
        request.role = pb.TextRole.Value(f"TEXT_ROLE_{args.role.upper()}")
    try:
        response = stub.AnswerQuery(request, timeout=args.deadline)
    except grpc.RpcError as error:
        return _fail(error)
    finally:
        channel.close()
    if args.json:
        from google.protobuf import json_format

        print(json.dumps(json_format.MessageToDict(response)))
        return 0
    label = "offline extractive provider" if response.offline else response.provider
    for failure in _failure_records(response):
        print(f"{failure['agent']} failed ({failure['code']}: {failure['message']})",
              file=sys.stderr)
    if response.passages_only:
        print("(no draft: the LLM did not answer in time; the retrieved passages follow)")
    else:
        print(response.answer)
        print(f"\n(confidence {response.confidence:.2f}; drafted by {label})")
    if response.drafts:
        cost = f"${response.cost_usd:.6f}" if response.cost_known else "cost unknown (no price)"
        print(f"  {len(response.drafts)} drafts, {response.total_tokens} tokens, {cost}; "
              f"stopped: {response.stop_reason}")
    _print_role(response)
    for i, source in enumerate(response.sources, 1):
        print(f"  [{i}] {source.document_id} {source.title[:70]!r} score {source.score:.3f}")
    return 0


def _print_role(response) -> None:
    """What a role did (sub-questions, refinements, the search's trajectory) and its spend."""
    for sub in response.sub_questions:
        print(f"  sub-question: {sub.question}\n    -> {sub.answer}")
    for number, refinement in enumerate(response.refinements, 1):
        print(f"  round {number} critique: {refinement.critique[:200]}")
    if response.HasField("step_search"):
        search = response.step_search
        for step in search.trajectory:
            print(f"  step (value {step.value:.2f}{', checked' if step.checked else ''}): "
                  f"{step.text}")
        print(f"  search: {search.leaves_evaluated} leaves evaluated, {search.steps_proposed} "
              f"steps proposed, depth {search.max_depth}, tree "
              f"{search.statistics.tree_size} nodes, complete: {search.complete}")
    if response.role and not response.drafts:
        cost = f"${response.cost_usd:.6f}" if response.cost_known else "cost unknown (no price)"
        print(f"  {response.total_tokens} tokens, {cost}; stopped: {response.stop_reason}")


def _write_port_file(path: str, content: dict) -> None:
    tmp = Path(path + ".tmp")
    tmp.write_text(json.dumps(content))
    tmp.replace(path)


def _key_store(args):
    """The store `keys` edits: `--file`, else the orchestrator's own (ORCHESTRATOR_API_KEYS_FILE,
    ORCHESTRATOR_REDIS_URL, else var/orchestrator/api-keys.json), and its Redis client (or None)."""
    from services.orchestrator.access import key_store, redis_client
    from services.orchestrator.access.keys import FileKeyStore
    from services.orchestrator.settings import OrchestratorSettings

    if args.file:
        return FileKeyStore(args.file), None
    settings = OrchestratorSettings()
    client = redis_client(settings)
    return key_store(settings, client), client


def cmd_keys(args) -> int:
    """`keys create NAME` prints a new key once (only its SHA-256 is stored) with its scopes
    (`--scope`, repeated; default `solve` and `query`), allowed collections, cap in flight and
    budgets; `keys list` shows names, creation times, scopes and own limits; `keys revoke NAME`
    deletes a key (running orchestrators refuse it within ORCHESTRATOR_API_KEYS_RELOAD_S)."""
    import asyncio

    from libs.errors import MeshError
    from services.orchestrator.access.keys import Budgets, Grants, RateLimits
    from services.orchestrator.access.scopes import DEFAULT_NEW_KEY_SCOPES

    async def run() -> int:
        store, client = _key_store(args)
        try:
            if args.keys_command == "create":
                own = (args.per_second, args.per_minute, args.per_hour)
                limits = None if own == (None, None, None) else \
                    RateLimits(*(value or 0 for value in own))
                budgets = (args.budget_tokens, args.budget_usd, args.budget_simulations)
                grants = Grants(
                    scopes=args.scope or DEFAULT_NEW_KEY_SCOPES, collections=args.collection,
                    max_in_flight=args.max_in_flight,
                    budgets=None if budgets == (None, None, None) else Budgets(
                        args.budget_tokens or 0, args.budget_usd or 0.0,
                        args.budget_simulations or 0))
                key = await store.create(args.name, limits, grants)
                print(key)
                print(f"key {args.name!r} (scopes {', '.join(sorted(grants.scopes))}) stored in "
                      f"{store.describe()} (as its SHA-256 only): copy it now, it cannot be shown "
                      "again", file=sys.stderr)
            elif args.keys_command == "revoke":
                await store.revoke(args.name)
                print(f"key {args.name!r} revoked in {store.describe()}", file=sys.stderr)
            else:
                records = sorted(await store.read(), key=lambda record: record.name)
                if args.json:
                    for record in records:
                        row = record.to_json()
                        del row["sha256"]
                        print(json.dumps(row))
                else:
                    print(f"{len(records)} keys in {store.describe()}")
                    for record in records:
                        own = record.limits
                        limits = (f"{own.per_second}/s {own.per_minute}/min {own.per_hour}/h"
                                  if own else "default limits")
                        scopes = ",".join(sorted(record.scopes)) if record.scopes else "all"
                        print(f"  {record.name:<24} created {record.created}  {limits}  "
                              f"scopes {scopes}")
            return 0
        finally:
            if client is not None:
                await client.aclose()

    try:
        return asyncio.run(run())
    except MeshError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def cmd_serve(args) -> int:
    """Runs one service's entry point, `services.<name>.main.main(settings, on_listening)`.

    A start-up failure (a taken port, bad settings, a locked data directory) is one line on stderr,
    e.g. "mcts: cannot bind 127.0.0.1:50052: address already in use", written as {"error": ...} to
    the port file too (the launcher shows it), with the traceback in the log; exit status 1.
    A service started by `mcts-mesh up` stops when that launcher ends (`follow_launcher`)."""
    from libs.server import BindError
    from mcts_mesh.launcher import follow_launcher

    follow_launcher()
    listening = False

    def on_listening(ports: dict[str, int]) -> None:
        nonlocal listening
        listening = True
        if args.port_file:
            _write_port_file(args.port_file, ports)

    try:
        settings_cls = _import(SERVICE_ENTRY[args.service][0])
        main_module = _import(SERVICE_ENTRY[args.service][1])
        overrides = {"log_format": args.log_format} if args.log_format else {}
        main_module.main(settings_cls(**overrides), on_listening=on_listening)
    except Exception as error:
        if listening:
            raise
        if isinstance(error, BindError):
            message = str(error)  # says it all; no traceback
        else:
            message = f"{args.service}: start-up failed: {type(error).__name__}: {error}"
            logging.getLogger("mcts_mesh.cli").exception("%s", message)
        print(message, file=sys.stderr, flush=True)
        if args.port_file:
            _write_port_file(args.port_file, {"error": message})
        return 1
    return 0


def _supervise(mesh, args) -> int:
    """Keeps the mesh up until a signal: restarts services that exit (`Supervisor`), or with
    --fail-fast stops the mesh when one exits. Returns the exit status of `up`."""
    from mcts_mesh.launcher import GaveUp, RestartPolicy, Supervisor

    if args.fail_fast:
        while all(p.poll() is None for p in mesh.processes.values()):
            time.sleep(0.5)
        dead = [n for n, p in mesh.processes.items() if p.poll() is not None]
        print(f"service exited: {', '.join(dead)}; stopping the mesh (--fail-fast)",
              file=sys.stderr)
        return 1
    supervisor = Supervisor(mesh, RestartPolicy(
        max_restarts=args.max_restarts, backoff_initial_s=args.restart_backoff,
        backoff_max_s=args.restart_backoff_max))
    try:
        while True:
            supervisor.step()
            time.sleep(0.2)
    except GaveUp as error:
        print(f"{error}; stopping the mesh", file=sys.stderr)
        return 1


def cmd_up(args) -> int:
    from mcts_mesh.launcher import LaunchError, start_mesh

    # SIGTERM and SIGINT both stop the mesh gracefully (a background job starts with SIGINT
    # ignored; the services run in their own sessions, so only this process gets the signal).
    # Only the first signal interrupts: a second one (a repeated Ctrl-C, or `make` and `timeout`
    # both signalling) must not break into the drain with a traceback.
    interrupted = False

    def interrupt(signum, frame):
        nonlocal interrupted
        if interrupted:
            return
        interrupted = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, interrupt)
    print("starting mcts, neural, retrieval, llm, orchestrator on loopback ...", flush=True)
    started = time.perf_counter()
    try:
        mesh = start_mesh(port_base=args.port_base, rest_port=args.rest_port,
                          log_dir=Path(args.log_dir) if args.log_dir else None,
                          log_format=args.log_format)
    except LaunchError as error:
        print(f"{error}; the mesh did not start", file=sys.stderr)
        return 1
    print(f"mesh up in {time.perf_counter() - started:.1f} s: " + ", ".join(
        f"{name} :{port}" for name, port in mesh.ports.items()) + f", REST :{mesh.rest_port}"
        f"  (logs in {next(iter(mesh.logs.values())).parent})", flush=True)
    print("metrics: " + ", ".join(f"{name} :{port}" for name, port in mesh.metrics_ports.items())
          + f" and REST :{mesh.rest_port}/metrics", flush=True)
    print(f"the backends require this run's mesh token (x-mesh-token), in {mesh.token_file}",
          flush=True)
    try:
        if args.demo:
            from mcts_mesh.demo import run_demo

            run_demo(mesh.target, args)
        print("serving; Ctrl-C stops the mesh", flush=True)
        return _supervise(mesh, args)
    except KeyboardInterrupt:
        print("\nstopping the mesh (graceful drain) ...", flush=True)
        return 0
    finally:
        mesh.stop()


def _router_routes(names: str):
    """The routes named in `--routes` ("mcts@deep,neural"); every route when empty."""
    from services.orchestrator.routing.rules import CONNECT_FOUR_ROUTES, parse_route

    if not names:
        return CONNECT_FOUR_ROUTES
    try:
        routes = [parse_route(name.strip()) for name in names.split(",")]
    except ValueError as error:
        raise SystemExit(f"train router: --routes: {error}") from error
    unknown = [route.name for route in routes if route not in CONNECT_FOUR_ROUTES]
    if unknown:
        raise SystemExit(f"train router: --routes: {', '.join(unknown)} is not a route the "
                         "meta-controller chooses among")
    return routes


def cmd_train_text_router(args) -> int:
    """`train router --text`: optionally run the labelled text workload (a language model is
    needed: without one it exits with one line), then train the text router from log + labels."""
    from services.orchestrator.text.roles import TextRole
    from training.router.text import TextRouterConfig, train_text_router
    from training.router.text_workload import DATASETS, NoLanguageModel, generate

    run_dir = Path(args.router_dir)
    logs = [Path(p) for p in args.routing_log] or [run_dir / "text-routing.jsonl"]
    labels = [Path(p) for p in args.labels] or [run_dir / "text-labels.jsonl"]
    if args.generate:
        datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
        roles = [name.strip() for name in args.roles.split(",") if name.strip()]
        unknown = [n for n in datasets if n not in DATASETS] + \
            [n for n in roles if n not in {str(role) for role in TextRole}]
        if unknown:
            raise SystemExit(f"train router --text: unknown dataset or role: {', '.join(unknown)}")
        try:
            data_dir = Path(args.data_dir) if args.data_dir else evaluation_dir()
            counts = generate(logs[0], labels[0], data_dir, args.generate, args.seed,
                              datasets, roles, args.text_simulations)
        except NoLanguageModel as error:
            raise SystemExit(f"train router --text: FAILED_PRECONDITION: {error.message}") \
                from error
        print(json.dumps({"generated": counts}), flush=True)
    try:
        report = train_text_router(TextRouterConfig(
            Path(args.output or "models/router-text"), logs, labels,
            token_weight=args.token_weight, latency_weight=args.text_latency_weight,
            epochs=args.text_epochs, lora_rank=args.lora_rank, seed=args.seed))
    except (ValueError, KeyError) as error:
        raise SystemExit(f"train router --text: {error}") from error
    history = report.pop("history")
    print(json.dumps({**report, "history": history[-1:]}, indent=2, default=str))
    return 0


def cmd_train_router(args) -> int:
    """`train router`: optionally run the labelled workload, then train from log + labels."""
    from training.router.connect4 import RouterConfig, generate, train_router

    if args.text:
        return cmd_train_text_router(args)

    run_dir = Path(args.router_dir)
    logs = [Path(p) for p in args.routing_log] or [run_dir / "routing.jsonl"]
    labels = [Path(p) for p in args.labels] or [run_dir / "labels.jsonl"]
    if args.generate:
        counts = generate(logs[0], labels[0], args.generate, args.seed,
                          Path(args.judge_cache) if args.judge_cache else None,
                          args.max_plies, _router_routes(args.routes))
        print(json.dumps({"generated": counts}), flush=True)
    try:
        report = train_router(RouterConfig(
            Path(args.output or "models/router-connect4"), logs, labels,
            latency_weight=args.latency_weight, hidden=args.hidden, epochs=args.router_epochs,
            seed=args.seed))
    except (ValueError, KeyError) as error:
        raise SystemExit(f"train router: {error}") from error
    print(json.dumps(report, indent=2, default=str))
    return 0


def cmd_train(args) -> int:
    if args.what == "router":
        return cmd_train_router(args)
    if args.what == "connect4-az":
        from mcts_mesh.az_commands import cmd_train_connect4_az

        return cmd_train_connect4_az(args)
    if args.what == "connect4-pv":
        from training.connect4_selfplay import SelfPlayConfig, train_connect4_pv

        report = train_connect4_pv(SelfPlayConfig(
            Path(args.output or "models/connect4-pv"), games=args.games,
            simulations=args.simulations, epochs=args.epochs, seed=args.seed,
            workers=args.workers))
    else:
        from training.reasoning.trainer import ReasoningConfig, train_reasoning

        if not args.preset:
            raise SystemExit(f"train {args.what}: --preset is required "
                             "(e.g. trm-mlp-cpu-sudoku6, hrm-cpu-sudoku6, trm-mlp-cpu-maze9)")
        report = train_reasoning(ReasoningConfig(
            args.what, args.preset, Path(args.output or f"models/{args.preset}"),
            steps=args.steps, batch_size=args.batch_size, blanks=args.blanks, seed=args.seed,
            eval_every=args.eval_every, eval_puzzles=args.eval_puzzles,
            time_limit_s=args.time_limit_s, lr=args.lr, task=args.task, init_from=args.init_from,
            device=_device(args.device), data_workers=args.data_workers))
    print(json.dumps(report, indent=2, default=str))
    return 0


def _device(choice: str | None) -> str:
    from training.device import resolve_device

    try:
        return resolve_device(choice or "auto")
    except ValueError as error:
        raise SystemExit(str(error)) from None


def cmd_puzzles_heldout(args) -> int:
    from mcts_mesh.puzzle_commands import held_out

    return held_out(args)


def cmd_models_export_embedder(args) -> int:
    from services.retrieval.onnx_export import check_manifest, export_embedder

    output = Path(args.output)
    if not args.force:
        try:
            check_manifest(output)
            print(f"{output}: up to date (an export of the packaged weights)")
            return 0
        except (FileNotFoundError, ValueError):
            pass
    if not args.verbose:  # onnxruntime's quantizer logs every tensor at INFO
        logging.getLogger().setLevel(logging.WARNING)
    started = time.perf_counter()
    manifest = export_embedder(output, force=True)
    print(f"{output}: int8 ONNX encoder ({output.stat().st_size / 1e6:.1f} MB, attention fused, "
          f"MatMul and attention weights int8 per channel) from {manifest['model']} in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


def cmd_models_presets(args) -> int:
    from services.neural.models.presets import PRESETS, preset_parameter_counts

    counts = preset_parameter_counts()
    rows = [{"name": preset.name, "architecture": preset.architecture,
             "parameters": counts[preset.name], "vocab_size": preset.config.vocab_size,
             "seq_len": preset.config.seq_len, "description": preset.description}
            for preset in PRESETS.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(row["name"]) for row in rows)
    print(f"{'preset':<{width}}  arch  {'parameters':>12}  vocab  seq_len  description")
    for row in rows:
        print(f"{row['name']:<{width}}  {row['architecture']:<4}  {row['parameters']:>12,}  "
              f"{row['vocab_size']:>5}  {row['seq_len']:>7}  {row['description']}")
    return 0


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def cmd_mcp(args) -> int:
    """Runs the MCP server (mcts_mesh/mcp_server.py) over the orchestrator at --target."""
    import os

    from mcts_mesh.mcp_server import serve, write_port_file

    # The global --api-key where the command has one, else $MCTS_MESH_API_KEY.
    api_key = getattr(args, "api_key", None) or os.environ.get("MCTS_MESH_API_KEY") or None
    serve(args.target, args.transport, host=args.host, port=args.port, deadline_s=args.deadline,
          api_key=api_key,
          on_listening=write_port_file(args.port_file) if args.port_file else None)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcts-mesh", description=__doc__)
    parser.add_argument("--target", default=DEFAULT_TARGET,
                        help="the orchestrator's gRPC address (default %(default)s)")
    parser.add_argument("--deadline", type=float, default=120.0,
                        help="deadline of each call in seconds (default %(default)s)")
    parser.add_argument("--api-key", default=os.environ.get(API_KEY_ENV) or None,
                        help=f"API key sent to the orchestrator as x-api-key (default: "
                             f"${API_KEY_ENV})")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run all five services on loopback")
    up.add_argument("--port-base", type=int, default=50051,
                    help="orchestrator gRPC port; the others follow +1..+4 (0: free ports)")
    up.add_argument("--rest-port", type=int, default=8080)
    up.add_argument("--log-dir", default=None)
    up.add_argument("--log-format", choices=["json", "text"], default=None,
                    help="every service's log lines: JSON objects (default) or plain text")
    up.add_argument("--demo", action="store_true",
                    help="send the demo workload (Pons positions, SciFact claims) once up")
    up.add_argument("--demo-positions", type=int, default=20,
                    help="Pons positions per file in the demo")
    up.add_argument("--data-dir", default=None,
                    help="evaluation data folder searched before the repository's data/ "
                         "(default: MCTS_MESH_DATA_DIR, else ../shared/data beside the "
                         "repository)")
    up.add_argument("--fail-fast", action="store_true",
                    help="stop the whole mesh when one service exits (no restarts)")
    up.add_argument("--max-restarts", type=_non_negative_int, default=5,
                    help="restarts in a row of one service before the mesh gives up; a service "
                         "that stays up 60 s starts a fresh count (default %(default)s)")
    up.add_argument("--restart-backoff", type=_positive_float, default=0.5,
                    help="seconds before the first restart, doubled for each one in a row "
                         "(default %(default)s)")
    up.add_argument("--restart-backoff-max", type=_positive_float, default=30.0,
                    help="longest wait before a restart, in seconds (default %(default)s)")
    up.set_defaults(func=cmd_up)

    mcp = sub.add_parser("mcp", help="an MCP server (tools solve, query, run_mcts, health) over "
                         "the orchestrator at --target")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                     help="stdio (the MCP client starts this command) or streamable HTTP on /mcp")
    mcp.add_argument("--host", default="127.0.0.1", help="http: address to bind")
    mcp.add_argument("--port", type=int, default=8765, help="http: port (0: a free one)")
    mcp.add_argument("--port-file", default=None, help="http: write the bound port as JSON here")
    mcp.set_defaults(func=cmd_mcp)

    serve = sub.add_parser("serve", help="run one service (its settings come from the environment)")
    serve.add_argument("service", choices=sorted(SERVICE_ENTRY))
    serve.add_argument("--port-file", default=None,
                       help="write the bound ports as JSON here once SERVING")
    serve.add_argument("--log-format", choices=["json", "text"], default=None,
                       help="log lines: JSON objects or plain text (default: the *_LOG_FORMAT "
                            "setting, json)")
    serve.set_defaults(func=cmd_serve)

    solve = sub.add_parser("solve", help="ask the orchestrator to solve a problem")
    solve.add_argument("game", choices=["connect4", "sudoku", "maze"])
    solve.add_argument("problem", help="connect4: columns 1-7 played from the empty board, e.g. "
                       "4453; sudoku: N*N characters, '.' or '0' blank; maze: a file (or text) of "
                       "rows of '#', ' ', 'S', 'G', or one line with the rows joined by '/'")
    for p in (solve,):
        p.add_argument("--agents", default=None,
                       help="comma list: mcts,neural,checker (connect4); hrm,trm,solver "
                            "(puzzles; default: the models served for the grid, then solver)")
        p.add_argument("--simulations", type=int, default=None)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--json", action="store_true")
        p.add_argument("--progress", action="store_true",
                       help="watch the consensus loop live on stderr (StreamSolveProblem)")
    solve.set_defaults(func=cmd_solve)

    evaluate = sub.add_parser("eval", help="evaluate the mesh on a benchmark file (Pons positions; "
                              "Sudoku: one puzzle per line or HRM CSV; maze: one maze per line, "
                              "rows joined by '/', or HRM CSV)")
    evaluate.add_argument("game", choices=["connect4", "sudoku", "maze"])
    evaluate.add_argument("file")
    evaluate.add_argument("--limit", type=int, default=None)
    evaluate.add_argument("--agents", default=None,
                          help="comma list: mcts,neural,checker (connect4); hrm,trm,solver "
                               "(puzzles; default: the models served for the grid, then solver)")
    evaluate.add_argument("--simulations", type=int, default=None)
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--json", action="store_true")
    evaluate.set_defaults(func=cmd_eval)

    ingest = sub.add_parser("ingest", help="ingest text, markdown or JSONL files into retrieval")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--collection", default="default")
    ingest.add_argument("--batch-size", type=int, default=64,
                        help="documents per stream message (default %(default)s)")
    ingest.add_argument("--limit", type=int, default=None,
                        help="ingest only the first N documents")
    ingest.add_argument("--max-document-chars", type=int, default=100_000,
                        help="refuse the input when a document is longer (retrieval's "
                             "RETRIEVAL_MAX_DOCUMENT_CHARS; default %(default)s)")
    ingest.add_argument("--quiet", action="store_true", help="no progress bar")
    ingest.set_defaults(func=cmd_ingest)

    query = sub.add_parser("query", help="answer a text query from the ingested documents")
    query.add_argument("text")
    query.add_argument("--collection", default="")
    query.add_argument("--top-k", type=int, default=None)
    query.add_argument("--samples", dest="sample_count", type=int, default=None,
                       help="self-consistency drafts per iteration (default: the setting, 5)")
    query.add_argument("--temperature", type=float, default=None)
    query.add_argument("--max-tokens", type=int, default=None,
                       help="token budget of the request (prompt + completion)")
    query.add_argument("--max-cost-usd", type=float, default=None,
                       help="cost budget in US dollars (needs LLM_PRICES for the model)")
    query.add_argument("--role", choices=["draft", "decompose", "refine"], default=None,
                       help="how the language model answers (default: drafts with "
                            "self-consistency)")
    query.add_argument("--mcts-iterations", type=int, default=None,
                       help="search over reasoning steps with this many simulations")
    query.add_argument("--step-branching", type=int, default=None,
                       help="search: next steps proposed per leaf (default: the setting, 3)")
    query.add_argument("--max-steps", type=int, default=None,
                       help="search: steps per trajectory at most (default: the setting, 6)")
    query.add_argument("--max-refinements", type=int, default=None,
                       help="refine: critique-and-revise rounds at most (default: the setting, 3)")
    query.add_argument("--mode", choices=["hybrid", "dense", "sparse"], default="hybrid",
                       help="retrieval ranking (default %(default)s)")
    query.add_argument("--fusion", choices=["dbsf", "rrf"], default="dbsf",
                       help="fusion of a hybrid retrieval (default %(default)s)")
    query.add_argument("--json", action="store_true")
    query.set_defaults(func=cmd_query)

    train = sub.add_parser("train", help="train a model (writes a checkpoint the service loads)")
    train.add_argument("what", choices=["connect4-pv", "connect4-az", "trm", "hrm", "router"])
    train.add_argument("--output", default=None,
                       help="checkpoint folder (default models/connect4-pv or models/<preset>)")
    train.add_argument("--games", type=int, default=1000)
    train.add_argument("--simulations", type=int, default=3000)
    train.add_argument("--epochs", type=int, default=4)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--workers", type=int, default=2, help="connect4-pv: self-play threads")
    train.add_argument("--preset", default=None, help="trm/hrm: a model preset")
    train.add_argument("--steps", type=int, default=20000, help="trm/hrm: optimizer steps")
    train.add_argument("--batch-size", type=int, default=64, help="trm/hrm")
    train.add_argument("--blanks", type=int, default=16, help="trm/hrm: blanks per Sudoku puzzle")
    train.add_argument("--init-from", default=None,
                       help="trm/hrm: continue from the weights of this checkpoint directory "
                            "(same preset)")
    train.add_argument("--task", choices=["sudoku", "maze"], default=None,
                       help="trm/hrm: what to generate (default: from the preset's vocabulary and "
                            "length; trm-mlp-cpu-maze9 trains on 9x9-grid mazes)")
    train.add_argument("--eval-every", type=int, default=500, help="trm/hrm: steps")
    train.add_argument("--eval-puzzles", type=int, default=1000, help="trm/hrm: held-out puzzles")
    train.add_argument("--time-limit-s", type=float, default=None, help="trm/hrm: training seconds")
    train.add_argument("--lr", type=float, default=1e-3, help="trm/hrm: learning rate")
    train.add_argument("--data-workers", type=int, default=0,
                       help="trm/hrm: processes generating puzzles ahead of the training steps "
                            "(0: in the step; use several on a GPU)")
    train.add_argument("--router-dir", default="var/router",
                       help="router: folder of the default routing log and labels files")
    train.add_argument("--routing-log", action="append", default=[],
                       help="router: a routing log (JSON lines) to train from; repeatable "
                            "(default: ROUTER_DIR/routing.jsonl)")
    train.add_argument("--labels", action="append", default=[],
                       help="router: a labels file ({thread_id, kept} lines); repeatable "
                            "(default: ROUTER_DIR/labels.jsonl)")
    train.add_argument("--generate", type=int, default=0, metavar="N",
                       help="router: first run the labelled workload, N positions of the train "
                            "split per Pons file, each once per agent set, on a private mesh")
    train.add_argument("--routes", default="",
                       help="router: --generate runs only these routes (comma-separated names, "
                            "e.g. mcts@deep)")
    train.add_argument("--max-plies", type=int, default=None, metavar="N",
                       help="router: --generate runs only the sampled positions with fewer than "
                            "N moves played")
    train.add_argument("--judge-cache", default="var/router/judged.jsonl",
                       help="router: cache of judged moves (empty: none)")
    train.add_argument("--latency-weight", type=float, default=0.3,
                       help="router: kept share traded for one second of mean latency")
    train.add_argument("--hidden", type=int, default=16, help="router: GRU hidden units")
    train.add_argument("--router-epochs", type=int, default=2000,
                       help="router: full-batch optimizer steps")
    train.add_argument("--text", action="store_true",
                       help="router: the text router (MiniLM with LoRA) instead of the Connect "
                            "Four GRU; log and labels default to ROUTER_DIR/text-routing.jsonl "
                            "and ROUTER_DIR/text-labels.jsonl, the output to models/router-text; "
                            "--generate N asks N train-split questions per dataset once per "
                            "role and needs a language model")
    train.add_argument("--data-dir", default=None,
                       help="router --text: the evaluation data folder holding gsm8k, "
                            "strategyqa, hotpotqa (default: MCTS_MESH_DATA_DIR, else "
                            "../shared/data beside the repository)")
    train.add_argument("--datasets", default="gsm8k,strategyqa,hotpotqa",
                       help="router --text: --generate asks these datasets' questions")
    train.add_argument("--roles", default="draft,decompose,refine,search",
                       help="router --text: --generate runs these roles")
    train.add_argument("--text-simulations", type=int, default=20,
                       help="router --text: the search role's mcts_iterations")
    train.add_argument("--token-weight", type=float, default=0.01,
                       help="router --text: correct share traded for 1,000 tokens")
    train.add_argument("--text-latency-weight", type=float, default=0.01,
                       help="router --text: correct share traded for one second of latency")
    train.add_argument("--text-epochs", type=int, default=30,
                       help="router --text: full-batch optimizer steps")
    train.add_argument("--lora-rank", type=int, default=8, help="router --text: LoRA rank r")
    train.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None,
                       help="connect4-az/trm/hrm: auto (default) = CUDA when present")
    from mcts_mesh import az_commands

    az_commands.add_train_arguments(train)
    train.set_defaults(func=cmd_train)
    az_commands.add_parsers(sub)

    puzzles = sub.add_parser("puzzles", help="write puzzle files (no orchestrator involved)")
    puzzles_sub = puzzles.add_subparsers(dest="puzzles_command", required=True)
    heldout = puzzles_sub.add_parser(
        "heldout", help="write the trainer's held-out set, held_out_set(task, count, seed), for "
                        "`eval sudoku|maze` (a training run with --seed T evaluates on seed T+1)")
    heldout.add_argument("kind", choices=["sudoku", "maze"])
    heldout.add_argument("--count", type=int, default=1000)
    heldout.add_argument("--seed", type=int, default=1,
                         help="held_out_set's seed (default 1: the set of `train --seed 0`)")
    heldout.add_argument("--size", type=int, default=6, help="sudoku: N")
    heldout.add_argument("--blanks", type=int, default=16, help="sudoku: blanks per puzzle")
    heldout.add_argument("--rows", type=int, default=4, help="maze: lattice rows (grid 2r+1)")
    heldout.add_argument("--cols", type=int, default=4, help="maze: lattice columns (grid 2c+1)")
    heldout.add_argument("--extra-openings", type=int, default=0,
                         help="maze: walls removed after carving (0: a perfect maze, one path)")
    heldout.add_argument("--min-path-length", type=int, default=4, help="maze: S-G steps")
    heldout.add_argument("--format", choices=["csv", "lines"], default="csv",
                         help="csv: HRM CSV with answers (default); lines: one puzzle a line")
    heldout.add_argument("--output", default=None, help="file to write (default stdout)")
    heldout.set_defaults(func=cmd_puzzles_heldout)

    keys = sub.add_parser("keys", help="API keys of the orchestrator (stored as SHA-256 hashes in "
                          "ORCHESTRATOR_API_KEYS_FILE, or Redis with ORCHESTRATOR_REDIS_URL)")
    keys.add_argument("--file", default=None,
                      help="edit this key file instead of the orchestrator's store")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="make a key and print it once")
    create.add_argument("name", help="1-64 of a-z 0-9 _ . - (e.g. the client's name)")
    for window in ("second", "minute", "hour"):
        create.add_argument(f"--per-{window}", type=int, default=None,
                            help=f"this key's own limit of calls per {window} (0: none; "
                                 "unset: the orchestrator's ORCHESTRATOR_RATE_LIMIT_* defaults)")
    create.add_argument("--scope", action="append", default=None,
                        choices=("solve", "query", "ingest", "admin"),  # access.scopes.SCOPES
                        help="what the key may call (repeat for several): solve, query, ingest, "
                             "admin (every method); default: solve and query")
    create.add_argument("--collection", action="append", default=None,
                        help="a collection the key may use (repeat for several; default: any)")
    create.add_argument("--max-in-flight", type=int, default=None,
                        help="this key's own cap on calls running at once (0: none; unset: "
                             "ORCHESTRATOR_MAX_IN_FLIGHT_PER_KEY)")
    for budget, kind, what in (("tokens", int, "LLM tokens"), ("usd", float, "US dollars"),
                               ("simulations", int, "MCTS simulations")):
        create.add_argument(f"--budget-{budget}", type=kind, default=None,
                            help=f"{what} this key may use per ORCHESTRATOR_BUDGET_WINDOW_S (0: "
                                 "none; any --budget-* set replaces the ORCHESTRATOR_BUDGET_* "
                                 "defaults)")
    keys_sub.add_parser("list", help="names, creation times and own limits (never the keys)"
                        ).add_argument("--json", action="store_true")
    keys_sub.add_parser("revoke", help="delete a key").add_argument("name")
    keys.set_defaults(func=cmd_keys)

    models = sub.add_parser("models", help="model presets (HRM, TRM); the retrieval encoder")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    presets = models_sub.add_parser("presets", help="list every HRM/TRM preset with its "
                                    "parameter count (as the papers count)")
    presets.add_argument("--json", action="store_true")
    presets.set_defaults(func=cmd_models_presets)
    export = models_sub.add_parser(
        "export-embedder", help="export the packaged all-MiniLM-L6-v2 to an int8 ONNX encoder "
                                "for retrieval (run by `make setup`; nothing is downloaded)")
    export.add_argument("--output", default="var/embedder/all-MiniLM-L6-v2-int8.onnx",
                        help="where to write it (RETRIEVAL_ONNX_PATH; default %(default)s)")
    export.add_argument("--force", action="store_true",
                        help="export again even when an export of the same weights is there")
    export.set_defaults(func=cmd_models_export_embedder)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except MissingDataset as error:
        print(f"mcts-mesh: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        if error.filename is None:
            raise
        # A file named on the command line that is missing or unreadable: one line, no traceback.
        print(f"mcts-mesh: {error.filename}: {error.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
