"""HRM against TRM through the mesh: every shipped reasoning checkpoint on the same held-out sets,
side by side (exact rate, cell accuracy, parameters, training time, segments used with ACT, and
milliseconds per puzzle at batch 1 and batch 1,000 on the CPU).

Sets, per model (its task from its checkpoint's metadata; Sudoku at its training blank count):
- "trainer": `held_out_set(task, count, seed=1)`, the held-out puzzles of `mcts-mesh train` with its
  default seed (`mcts-mesh puzzles heldout` writes the same);
- "independent": a generator that is not the trainer's: Sudoku
  `experiments/2026-11-24-sudoku-independent-puzzles/sudoku_puzzles.py`, mazes
  `experiments/2026-11-29-maze-independent-puzzles/maze_puzzles.py` (randomised Kruskal), seed 7.

Through the mesh: one real neural service holding the models and, per model, a real orchestrator
that names it (`ORCHESTRATOR_HRM_MODEL` / `_TRM_MODEL`), in this process on loopback port 0, on the
CPU: every puzzle goes to `SolveProblem` naming only the model's agent (`AGENT_HRM` or
`AGENT_TRM`, paper halting), up to `--concurrency` at once so the service batches them; a proposal
is answered only when the checker verifies it, else FAILED_PRECONDITION ("verified").

The Solve core (`solve_batch`, what the service runs; tests check both give the same predictions)
in this process, one torch thread, one batch per set: exact and cell accuracy (all cells, as the
trainer's evaluation counts them) of the prediction after the model's 8 segments ("paper"); the
exact rate and mean segments used when the halting head stops it ("act"); and CPU milliseconds
per puzzle (this thread's CPU time, so a busy machine does not inflate it) at batch 1 (the mean
of `--batch1-calls` puzzles) and at batch N = `--count` (each set's batch).

    nice .venv/bin/python bench/reasoning_models.py [--models hrm-sudoku6-b16 trm-sudoku6-b16 ...]
        [--count 1000] [--mesh-count 200] [--concurrency 16] [--json FILE]
    .venv/bin/python bench/reasoning_models.py --table FILE...   # the table of saved rows
    .venv/bin/python bench/reasoning_models.py --quick            # a smoke run (make bench-quick)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
import torch
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from mesh.orchestrator.v1 import orchestrator_service_pb2_grpc

from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from libs.server import start_server
from mcts_mesh.puzzle_files import held_out_rows, maze_rows
from services.neural.checkpoint import load_checkpoint
from services.neural.main import build_servicers as neural_servicers
from services.neural.models.reasoning_tokens import encode_maze, encode_sudoku
from services.neural.reasoning_segments import run_segments
from services.neural.reasoning_solver import solve_batch
from services.neural.reasoning_task import task_from_metadata
from services.neural.settings import NeuralSettings
from services.orchestrator.main import Wiring
from services.orchestrator.main import build_servicers as orchestrator_servicers
from services.orchestrator.settings import OrchestratorSettings
from training.reasoning.data import MazeTask, SudokuTask

REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "models"
HELD_OUT_SEED = 1
INDEPENDENT_SEED = 7
QUICK_MODELS = ("hrm-sudoku6-b16", "trm-sudoku6-b16")
DEADLINE_S = 600.0
"""Deadline of a request and of its Solve call: a shared 2-core machine under load takes seconds
per batch, and a request that runs out of time would count as a wrong answer."""
AGENTS = {"hrm": pb.AGENT_HRM, "trm": pb.AGENT_TRM}
GENERATORS = {
    "sudoku": REPO / "experiments/2026-11-24-sudoku-independent-puzzles/sudoku_puzzles.py",
    "maze": REPO / "experiments/2026-11-29-maze-independent-puzzles/maze_puzzles.py",
}


@dataclass
class Row:
    """One model on one set: the mesh's verified share of `mesh_puzzles`, the core's scores on
    `puzzles` (one batch of that size, whose CPU ms per puzzle is `ms_batch`)."""

    model: str
    architecture: str
    task: str
    set: str
    puzzles: int
    mesh_puzzles: int
    verified: float
    exact: float
    cell_accuracy: float
    act_exact: float
    act_segments: float
    parameters: int
    train_minutes: float | None
    started_from: str
    ms_batch1: float
    ms_batch: float
    batch: int


def _generator(kind: str):
    path = GENERATORS[kind]
    spec = importlib.util.spec_from_file_location(f"independent_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_of(metadata: dict) -> SudokuTask | MazeTask:
    """The trainer's task of a checkpoint (its metadata's "task" and "task_kind")."""
    if metadata["task_kind"] == "SudokuTask":
        return SudokuTask(**metadata["task"])
    return MazeTask(**metadata["task"])


def puzzle_sets(task: SudokuTask | MazeTask, count: int) -> dict[str, list]:
    """{"trainer": [(question, answer)], "independent": [...]} decoded grids."""
    independent = []
    rng = np.random.default_rng(INDEPENDENT_SEED)
    if isinstance(task, SudokuTask):
        generator, shape = _generator("sudoku"), sudoku_lib.box_shape_for(task.size)
        for _ in range(count):
            independent.append(generator.puzzle(shape, task.blanks, rng))
    else:
        generator = _generator("maze")
        for _ in range(count):
            question = generator.maze(task.rows, task.cols, rng, task.min_path_length)
            independent.append((question, maze_lib.solve_maze(question)))
    return {"trainer": held_out_rows(task, count, HELD_OUT_SEED), "independent": independent}


def flat(grid: np.ndarray, sudoku: bool) -> str:
    """A grid as the neural service's Solve reads and answers it: row-major, no separators."""
    return sudoku_lib.format_grid(grid) if sudoku else maze_lib.format_maze(grid)


def problem(grid: np.ndarray, sudoku: bool) -> dict:
    """SolveProblemRequest's problem field for a question grid."""
    if sudoku:
        return {"sudoku": pb.SudokuProblem(puzzle=sudoku_lib.format_grid(grid))}
    return {"maze": pb.MazeProblem(grid=maze_rows(grid))}


async def bounded(calls, concurrency: int) -> list:
    """Awaits the coroutines of `calls` with at most `concurrency` in flight, results in order."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(call):
        async with semaphore:
            return await call

    return await asyncio.gather(*(one(call) for call in calls))


async def verified_share(stub, agent: int, items: list, sudoku: bool, concurrency: int) -> float:
    """Share of `items` whose SolveProblem naming `agent` alone came back answered by it (the
    checker verified the proposal); a rejected proposal is FAILED_PRECONDITION."""
    async def ask(question):
        try:
            response = await stub.SolveProblem(
                pb.SolveProblemRequest(agents=[agent], **problem(question, sudoku)),
                timeout=DEADLINE_S)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return False
        answer = response.sudoku.valid if sudoku else response.maze.optimal
        return bool(answer) and response.answered_by == agent

    results = await bounded([ask(question) for question, _ in items], concurrency)
    return sum(results) / len(items)


def core_scores(directory: Path, sets: dict[str, list], sudoku: bool, calls: int
                ) -> tuple[dict[str, dict], float]:
    """The Solve core's segment loop (`run_segments`, what `solve_batch` runs) in this process,
    one batch per set, all of the model's segments, ACT tracked alongside: exact and cell accuracy
    after the last segment ("paper"), exact and mean segments used where the halting head stops
    ("act"), and the CPU milliseconds per puzzle of the batch ("ms_batch"). Also returns the CPU
    ms per puzzle at batch 1 (`solve_batch`, paper mode, the mean of `calls` puzzles)."""
    checkpoint = load_checkpoint(directory)
    module, grid_task = checkpoint.model.eval(), task_from_metadata(checkpoint.metadata)
    segments = module.config.halt_max_steps
    scores, first = {}, None
    for name, items in sets.items():
        inputs = np.stack([grid_task.encode(flat(q, sudoku)) for q, _ in items])
        labels = torch.from_numpy(np.stack([encode_sudoku(a) if sudoku else encode_maze(a)
                                            for _, a in items]).astype(np.int64))
        first = inputs if first is None else first
        started = time.thread_time()
        run = run_segments(module, torch.from_numpy(inputs),
                           torch.zeros(len(items), dtype=torch.int32), segments, True,
                           stop_early=False)
        spent = (time.thread_time() - started) * 1000.0 / len(items)
        paper = run.predictions[-1]
        act = run.predictions[run.segments_used - 1, torch.arange(len(items))]
        scores[name] = {"exact": float((paper == labels).all(-1).float().mean()),
                        "cell_accuracy": float((paper == labels).float().mean()),
                        "act_exact": float((act == labels).all(-1).float().mean()),
                        "act_segments": float(run.segments_used.float().mean()),
                        "ms_batch": spent, "batch": len(items)}

    def single(row: np.ndarray) -> float:
        started = time.thread_time()
        solve_batch(module, row, np.full(1, segments, np.int64), np.zeros(1, bool))
        return (time.thread_time() - started) * 1000.0

    single(first[:1])  # warm-up
    return scores, float(np.mean([single(first[i:i + 1]) for i in range(calls)]))


def train_facts(metadata: dict) -> tuple[float | None, str]:
    """(training minutes recorded in the checkpoint, the checkpoint it started from or "")."""
    seconds = (metadata.get("metrics") or {}).get("train_seconds")
    return (None if seconds is None else seconds / 60.0), str(metadata.get("init_from", ""))


async def verified_through_mesh(name: str, neural_port: int, sets: dict[str, list],
                               concurrency: int) -> dict[str, float]:
    """{set: verified share} of model `name` through a real orchestrator that names it."""
    metadata = json.loads((MODELS / name / "config.json").read_text())["metadata"]
    architecture = metadata["architecture"]
    sudoku = metadata["task_kind"] == "SudokuTask"
    settings = OrchestratorSettings(
        port=0, rest_port=-1, neural_target=f"127.0.0.1:{neural_port}",
        reasoning_halting_mode="paper", reasoning_deadline_s=DEADLINE_S,
        request_deadline_s=DEADLINE_S, **{f"{architecture}_model": name})
    wiring = Wiring(settings)
    servicers, ready = await orchestrator_servicers(settings, wiring)
    orchestrator = await start_server("orchestrator", settings, servicers, ready)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{orchestrator.port}") as channel:
            stub = orchestrator_service_pb2_grpc.OrchestratorServiceStub(channel)
            return {set_name: await verified_share(stub, AGENTS[architecture], items, sudoku,
                                                   concurrency)
                    for set_name, items in sets.items()}
    finally:
        await orchestrator.stop(0)
        await wiring.aclose()


async def bench(names: list[str], count: int, mesh_count: int, concurrency: int,
                calls: int) -> list[Row]:
    """Every model of `names` (folders of models/) on its task's two sets; see the module."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as work:
        served = Path(work) / "models"
        for name in names:
            shutil.copytree(MODELS / name, served / name)
        settings = NeuralSettings(port=0, models_dir=served, device="cpu")
        servicers, ready = await neural_servicers(settings)
        neural = await start_server("neural", settings, servicers, ready)
        try:
            for name in names:
                rows.extend(await model_rows(name, neural.port, count, mesh_count, concurrency,
                                             calls))
        finally:
            await neural.stop(0)
    return rows


async def model_rows(name: str, port: int, count: int, mesh_count: int, concurrency: int,
                     calls: int) -> list[Row]:
    """Model `name`'s rows: the mesh's verified share on the first `mesh_count` puzzles of each
    set, the core's scores on all `count`."""
    metadata = json.loads((MODELS / name / "config.json").read_text())["metadata"]
    task = task_of(metadata)
    sets = puzzle_sets(task, count)
    mesh_sets = {set_name: items[:mesh_count] for set_name, items in sets.items()}
    verified = await verified_through_mesh(name, port, mesh_sets, concurrency)
    sudoku = isinstance(task, SudokuTask)
    scores, single = core_scores(MODELS / name, sets, sudoku, calls)
    minutes, started_from = train_facts(metadata)
    task_name = (f"sudoku-{task.size}x{task.size} b{task.blanks}" if sudoku
                 else f"maze-{task.height}x{task.width}")
    return [Row(model=name, architecture=metadata["architecture"], task=task_name,
                set=set_name, puzzles=len(sets[set_name]), mesh_puzzles=len(mesh_sets[set_name]),
                verified=verified[set_name], parameters=int(metadata["parameters"]),
                train_minutes=minutes, started_from=started_from, ms_batch1=single,
                **scores[set_name])
            for set_name in sets]


def table(rows: list[dict]) -> str:
    """Rows (`Row` as dicts) as a Markdown table."""
    lines = ["| task | set | model | parameters | training min | verified through the mesh | "
             "exact (8 segments) | cell accuracy | ACT: exact at mean segments | "
             "CPU ms/puzzle, batch 1 | CPU ms/puzzle, batch N |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        minutes = "?" if row["train_minutes"] is None else f"{row['train_minutes']:.1f}"
        if row["started_from"]:
            start = Path(row["started_from"])
            minutes += f" (from {(start.parent if start.name == 'checkpoint' else start).name})"
        verified = round(row["verified"] * row["mesh_puzzles"])
        lines.append(
            f"| {row['task']} | {row['set']} | `{row['model']}` | {row['parameters']:,} | "
            f"{minutes} | {row['verified']:.1%} ({verified}/{row['mesh_puzzles']}) | "
            f"{row['exact']:.1%} of {row['puzzles']:,} | {row['cell_accuracy']:.2%} | "
            f"{row['act_exact']:.1%} at {row['act_segments']:.2f} | {row['ms_batch1']:.1f} | "
            f"{row['ms_batch']:.1f} (N = {row['batch']:,}) |")
    return "\n".join(lines)


def default_models() -> list[str]:
    """Every HRM and TRM checkpoint folder of models/, by task then name."""
    names = [path.parent.name for path in MODELS.glob("*/config.json")
             if path.parent.name.split("-")[0] in AGENTS]
    return sorted(names, key=lambda name: (name.split("-", 1)[1], name))


def main() -> None:
    global MODELS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None,
                        help="folders of models/ (default: every hrm-* and trm-*)")
    parser.add_argument("--models-dir", default=str(MODELS),
                        help="folder holding the checkpoint folders (default models/)")
    parser.add_argument("--count", type=int, default=1000,
                        help="puzzles per set for the core's scores (one batch of this size)")
    parser.add_argument("--mesh-count", type=int, default=None,
                        help="the first N of each set go through the mesh (default: all)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--batch1-calls", type=int, default=20,
                        help="single puzzles timed at batch 1")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the rows as JSON to FILE")
    parser.add_argument("--table", nargs="+", default=None, metavar="FILE",
                        help="print the table of earlier --json files and exit")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run in about a minute: the 16-blank Sudoku models, 8 "
                             "puzzles a set, 4 through the mesh (make bench-quick)")
    args = parser.parse_args()
    MODELS = Path(args.models_dir)
    if args.quick:
        args.count, args.mesh_count, args.batch1_calls = 8, 4, 2
        args.models = args.models or [name for name in QUICK_MODELS
                                      if (MODELS / name / "config.json").is_file()]
    if args.table:
        print(table([row for path in args.table for row in json.loads(Path(path).read_text())]))
        return
    torch.set_num_threads(1)
    names = args.models or default_models()
    started = time.perf_counter()
    rows = asyncio.run(bench(names, args.count, args.mesh_count or args.count, args.concurrency,
                             args.batch1_calls))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(row) for row in rows], indent=2))
    print(table([asdict(row) for row in rows]))
    print(f"({len(names)} models, {args.count} puzzles a set, "
          f"{time.perf_counter() - started:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
