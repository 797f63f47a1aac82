"""The demo workload `make run` sends to a freshly started mesh, through the public gRPC API only.

1. Connect Four: the first positions of each Pons benchmark file; for each, the orchestrator's move
   and whether it keeps the position's game-theoretic outcome (judged here with the exact solver).
2. 6x6 Sudoku: a few generated puzzles (the TRM trainer's held-out set, 16 blanks); the served TRM
   proposes, the checker verifies, the exact solver answers what the TRM gets wrong, and each line
   says which agent's answer came back.
3. Mazes: a few generated mazes of 4x4 and of 5x5 lattice cells (9x9 and 11x11 grids; the maze
   trainer's held-out sets): the served HRM or TRM proposes a path, the checker verifies that it
   is valid and shortest, the exact solver answers when it is not, and each line says which
   agent (and checkpoint) answered.
4. SciFact: a subset of the corpus is ingested once (the store keeps it on disk between runs),
   then a few test claims are answered with their sources, each marked by whether a source is one
   the qrels judge relevant.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc

from libs.data import dataset

PONS_FILES = ("Test_L3_R1", "Test_L2_R1", "Test_L2_R2", "Test_L1_R1", "Test_L1_R2", "Test_L1_R3")
# Judging a move in a Begin-Hard position takes the exact solver 7-20 s, so the demo takes a few;
# `mcts-mesh eval connect4` runs whole files.
PER_FILE_CAP = {"Test_L1_R3": 5}
SUDOKU6_PUZZLES = 5
MAZES = 3
MAZE_CELLS = (4, 5)
"""Lattice cells per side of the demo's mazes (9x9 and 11x11 grids)."""
SCIFACT_COLLECTION = "scifact"
SCIFACT_CLAIMS = 5
SCIFACT_DISTRACTORS = 300


def _connect_four(stub, data_dir: Path | None, per_file: int) -> None:
    from mesh.common.v1 import common_pb2
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.connect4.outcome import keeps_outcome
    from libs.connect4.pons import read_pons

    print("\n== Connect Four: Pons benchmark positions through OrchestratorService.SolveProblem")
    print(f"{'file':<12} {'positions':>9} {'kept':>5} {'rate':>7} {'median ms':>10} {'agents'}")
    for name in PONS_FILES:
        rows = read_pons(dataset("connect4-pons", data_dir) / name,
                              min(per_file, PER_FILE_CAP.get(name, per_file)))
        kept, latencies, agents = 0, [], set()
        for moves, score in rows:
            started = time.perf_counter()
            response = stub.SolveProblem(
                pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves=moves)),
                timeout=120)
            latencies.append((time.perf_counter() - started) * 1e3)
            kept += keeps_outcome(moves, response.connect_four.column, score)
            agents.update(pb.Agent.Name(a).removeprefix("AGENT_").lower() for a in response.agents)
        latencies.sort()
        print(f"{name:<12} {len(rows):>9} {kept:>5} {kept / len(rows):>7.1%} "
              f"{latencies[len(latencies) // 2]:>10.0f} {','.join(sorted(agents))}", flush=True)


def _answered_by(response) -> str:
    """The agent that answered ("solver"), with the checkpoint its vote names when it is HRM or
    TRM: "hrm (hrm-sudoku6-b16)"."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    agent = pb.Agent.Name(response.answered_by).removeprefix("AGENT_").lower()
    for vote in response.votes:
        if vote.agent == response.answered_by and agent in ("hrm", "trm") and vote.rationale:
            return f"{agent} ({vote.rationale.split(' ', 1)[0]})"
    return agent


def _sudoku6(stub) -> None:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from services.neural.models.reasoning_tokens import decode_sudoku
    from training.reasoning.data import SudokuTask, held_out_set

    print("\n== 6x6 Sudoku (held-out generated puzzles, 16 blanks) through SolveProblem")
    held_out = held_out_set(SudokuTask(size=6, blanks=16), SUDOKU6_PUZZLES, seed=1)
    for tokens in held_out.inputs:
        puzzle = "".join(str(d) if d else "." for d in decode_sudoku(tokens, 6).reshape(-1))
        started = time.perf_counter()
        response = stub.SolveProblem(
            pb.SolveProblemRequest(sudoku=pb.SudokuProblem(puzzle=puzzle)), timeout=60)
        elapsed = (time.perf_counter() - started) * 1e3
        answered = _answered_by(response)
        print(f"{puzzle} -> {response.sudoku.solution}  answered by {answered}, "
              f"{elapsed:.0f} ms", flush=True)


def _mazes(stub) -> None:
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from mcts_mesh.puzzle_files import held_out_rows, maze_rows
    from training.reasoning.data import MazeTask

    for cells in MAZE_CELLS:
        task = MazeTask(rows=cells, cols=cells)
        print(f"\n== Mazes ({task.rows}x{task.cols} cells, {2 * cells + 1}x{2 * cells + 1} grid, "
              "held-out generated) through SolveProblem")
        for i, (question, _) in enumerate(held_out_rows(task, MAZES, seed=1)):
            grid = maze_rows(question)
            started = time.perf_counter()
            response = stub.SolveProblem(pb.SolveProblemRequest(maze=pb.MazeProblem(grid=grid)),
                                         timeout=60)
            elapsed = (time.perf_counter() - started) * 1e3
            answered = _answered_by(response)
            if i == 0:
                print(response.maze.grid)
            print(f"maze {i + 1}: path of {response.maze.path_length} steps, optimal "
                  f"{response.maze.optimal}; answered by {answered}, {elapsed:.0f} ms",
                  flush=True)


def _scifact_subset(root: Path, claims: list[dict], relevant: dict[str, set[str]]):
    """The documents relevant to the demo's claims plus the first distractors of the corpus."""
    wanted = set().union(*(relevant[c["_id"]] for c in claims))
    with (root / "corpus.jsonl").open() as corpus:
        docs = [json.loads(line) for line in corpus]
    chosen = [d for d in docs if d["_id"] in wanted]
    chosen += [d for d in docs if d["_id"] not in wanted][:SCIFACT_DISTRACTORS]
    return chosen


def _scifact(stub, data_dir: Path | None) -> None:
    from mesh.common.v1 import common_pb2
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    root = dataset("scifact-demo", data_dir)
    relevant: dict[str, set[str]] = {}
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, _ = line.split("\t")
        relevant.setdefault(query_id, set()).add(doc_id)
    queries = [json.loads(line) for line in (root / "queries.jsonl").read_text().splitlines()]
    claims = [q for q in queries if q["_id"] in relevant][:SCIFACT_CLAIMS]

    print("\n== SciFact: claims answered from the ingested corpus through AnswerQuery")
    try:
        stub.AnswerQuery(pb.AnswerQueryRequest(query="probe", collection=SCIFACT_COLLECTION),
                         timeout=60)
        print(f"collection {SCIFACT_COLLECTION!r} already on disk; not re-ingesting")
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
        docs = _scifact_subset(root, claims, relevant)
        started = time.perf_counter()
        reply = stub.IngestDocuments(pb.IngestDocumentsRequest(
            collection=SCIFACT_COLLECTION,
            documents=[common_pb2.Document(id=d["_id"], title=d["title"], text=d["text"],
                                           source="beir-scifact/corpus.jsonl") for d in docs]),
            timeout=900)
        print(f"ingested {reply.document_count} SciFact abstracts as {reply.chunk_count} chunks in "
              f"{time.perf_counter() - started:.1f} s ({reply.skipped_document_count} already "
              "stored unchanged, skipped)")
    hits = 0
    for claim in claims:
        response = stub.AnswerQuery(
            pb.AnswerQueryRequest(query=claim["text"], collection=SCIFACT_COLLECTION), timeout=120)
        found = {s.document_id for s in response.sources} & relevant[claim["_id"]]
        hits += bool(found)
        label = "offline extractive" if response.offline else response.provider
        print(f"\nclaim {claim['_id']}: {claim['text']}")
        print(f"answer ({label}, confidence {response.confidence:.2f}): {response.answer[:400]}")
        for i, source in enumerate(response.sources, 1):
            mark = "relevant" if source.document_id in relevant[claim["_id"]] else ""
            print(f"  [{i}] doc {source.document_id} score {source.score:.3f} {mark} "
                  f"{source.title[:60]!r}")
    print(f"\n{hits}/{len(claims)} claims had a qrels-relevant abstract among their sources")


def run_demo(target: str, args) -> None:
    """Sends the demo workload to the orchestrator at `target` and prints what came back."""
    from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

    from mcts_mesh.client import open_channel

    data_dir = Path(args.data_dir) if args.data_dir else None
    with open_channel(target, getattr(args, "api_key", None)) as channel:
        stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
        _connect_four(stub, data_dir, args.demo_positions)
        _sudoku6(stub)
        _mazes(stub)
        _scifact(stub, data_dir)
