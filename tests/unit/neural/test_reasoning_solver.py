"""The Solve core: grids in the trainer's tokens, the same segment loop and rates as the held-out
evaluation in both halting modes, per-sample ACT stops, dynamic batching, the errors that name
the field, and reloads that keep the previous model serving when the new checkpoint is bad.
Tiny untrained HRM / TRM models whose halting heads are randomised so ACT stops vary."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict

import numpy as np
import pytest
import torch

from libs.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from libs.puzzles import maze as maze_lib
from libs.puzzles import sudoku as sudoku_lib
from services.neural.checkpoint import CONFIG_FILE, WEIGHTS_FILE, CheckpointError, save_checkpoint
from services.neural.models.connect4_pv import Connect4PV, Connect4PVConfig
from services.neural.models.hrm import HRM, HRMConfig
from services.neural.models.trm import TRM, TRMConfig
from services.neural.reasoning_segments import run_segments
from services.neural.reasoning_solver import MAX_SEGMENTS, ReasoningSolver
from services.neural.reasoning_task import (
    PADDING_CHAR,
    GridTask,
    TaskError,
    parse_task_name,
    task_from_metadata,
)
from services.neural.registry import ModelRegistry
from services.neural.warmup import warm_up
from training.reasoning.data import (
    MazeTask,
    PuzzleBatch,
    SudokuTask,
    encode_maze,
    encode_sudoku,
    held_out_set,
)
from training.reasoning.evaluation import evaluate

SUDOKU6 = SudokuTask(size=6, blanks=4)
MAZE = MazeTask(rows=2, cols=2, extra_openings=0, min_path_length=2)
SEGMENTS = 4
HELD_OUT_SEED = 11


def _randomise_halting(model: torch.nn.Module, seed: int, digits_only: bool) -> torch.nn.Module:
    """Random halting-head weights, so halting decisions vary by puzzle and segment. With
    `digits_only`, the padding and blank logits are 0 while the last two digits' logits are
    opposite, so some digit always wins: predictions are digits, one grid character each."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.q_head.weight.copy_(torch.randn(model.q_head.weight.shape, generator=generator))
        model.q_head.bias.zero_()
        if digits_only:
            model.lm_head.weight[:2] = 0.0
            model.lm_head.weight[-1] = -model.lm_head.weight[-2]
    return model.eval()


def tiny_trm(task=SUDOKU6, mlp_t: bool = True, seed: int = 0) -> TRM:
    torch.manual_seed(seed)
    model = TRM(TRMConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, hidden_size=32,
                          num_heads=2, layers=1, h_cycles=2, l_cycles=2, mlp_t=mlp_t,
                          pos_encodings="none" if mlp_t else "rope", puzzle_emb_ndim=32,
                          puzzle_emb_len=1, halt_max_steps=SEGMENTS))
    return _randomise_halting(model, seed + 1, isinstance(task, SudokuTask))


def tiny_hrm(task=SUDOKU6, seed: int = 0) -> HRM:
    torch.manual_seed(seed)
    model = HRM(HRMConfig(vocab_size=task.vocab_size, seq_len=task.seq_len, hidden_size=32,
                          num_heads=2, h_layers=1, l_layers=1, h_cycles=1, l_cycles=2,
                          puzzle_emb_ndim=32, halt_max_steps=SEGMENTS))
    return _randomise_halting(model, seed + 1, isinstance(task, SudokuTask))


def _halt_about_half(model: torch.nn.Module) -> torch.nn.Module:
    """Shifts the halting logit so about half of the puzzles of `HELD_OUT` halt at segment 1."""
    data = held_out_set(SUDOKU6, 24, seed=HELD_OUT_SEED)
    with torch.no_grad():
        _, output = model(model.initial_carry(len(data)), data.inputs, data.puzzle_identifiers)
        q_continue = getattr(output, "q_continue_logits", None)
        margin = output.q_halt_logits - (0 if q_continue is None else q_continue)
        model.q_head.bias[0] -= margin.median() + 1e-3
    return model


def _metadata(task) -> dict:
    return {"task_kind": type(task).__name__, "task": asdict(task)}


def _save(directory, model, architecture, task) -> str:
    return save_checkpoint(directory, model, architecture, _metadata(task))


@pytest.fixture
def models_dir(tmp_path):
    root = tmp_path / "models"
    _save(root / "trm-sudoku6", _halt_about_half(tiny_trm()), "trm", SUDOKU6)
    _save(root / "hrm-sudoku6", _halt_about_half(tiny_hrm()), "hrm", SUDOKU6)
    _save(root / "trm-maze5", tiny_trm(MAZE, mlp_t=False), "trm", MAZE)
    torch.manual_seed(3)
    save_checkpoint(root / "connect4-pv", Connect4PV(Connect4PVConfig(channels=8, blocks=1,
                                                                      value_hidden=16)),
                    "connect4_pv", {})
    return root


@pytest.fixture
async def solver_for():
    solvers = []

    def make(registry, max_wait_ms=1.0):
        solver = ReasoningSolver(lambda: registry, max_batch=64, max_wait_ms=max_wait_ms)
        solvers.append(solver)
        return solver

    yield make
    for solver in solvers:
        await solver.close()


# --- tasks and grids ----------------------------------------------------------------------------

def test_tasks_from_the_trainers_metadata_and_names():
    assert task_from_metadata(_metadata(SUDOKU6)) == GridTask("sudoku", 6, 6)
    assert task_from_metadata(_metadata(SudokuTask(size=9))).name == "sudoku-9x9"
    assert task_from_metadata(_metadata(MazeTask(rows=4, cols=4))).name == "maze-9x9"
    assert task_from_metadata({"task": "maze-30x30"}) == GridTask("maze", 30, 30)
    assert task_from_metadata({"games": 3}) is None
    assert parse_task_name("sudoku-4x4").vocab_size == 6
    for bad in ({"task": "chess-8x8"}, {"task_kind": "ArcTask", "task": {}},
                {"task_kind": "SudokuTask", "task": {"blanks": 3}}, {"task": "sudoku-7x7"},
                {"task": "sudoku-6x9"}):
        with pytest.raises(TaskError):
            task_from_metadata(bad)


def test_grids_become_the_trainers_tokens_and_back():
    rng = np.random.default_rng(0)
    task = GridTask("sudoku", 6, 6)
    puzzle, solution = sudoku_lib.generate(sudoku_lib.box_shape_for(6), 10, rng)
    text = sudoku_lib.format_grid(puzzle)
    np.testing.assert_array_equal(task.encode(text), encode_sudoku(puzzle))
    np.testing.assert_array_equal(task.encode(text.replace(".", "0")), encode_sudoku(puzzle))
    assert task.decode(encode_sudoku(solution)) == sudoku_lib.format_grid(solution)
    assert task.decode(np.zeros(36, dtype=np.int64)) == "." * 36  # padding reads as blank

    question, answer = maze_lib.generate_maze(2, 2, rng, 0, 2)
    maze = GridTask("maze", 5, 5)
    np.testing.assert_array_equal(maze.encode(maze_lib.format_maze(question)),
                                  encode_maze(question))
    assert maze.decode(encode_maze(answer)) == maze_lib.format_maze(answer)
    assert maze.decode(np.zeros(25, dtype=np.int64)) == PADDING_CHAR * 25
    assert maze.encode(maze.placeholder()).shape == (25,)


@pytest.mark.parametrize("task, grid, says", [
    ("sudoku-6x6", "1" * 35, "36 characters"),
    ("sudoku-6x6", "", "got 0"),
    ("sudoku-6x6", "7" + "." * 35, "cell 0"),
    ("sudoku-6x6", "." * 35 + "x", "row 6, column 6"),
    ("maze-5x5", "S" + " " * 23 + "o", "'o'"),
    ("maze-5x5", "S" + " " * 24, "exactly one 'G'"),
    ("maze-5x5", "SS" + " " * 22 + "G", "exactly one 'S'"),
], ids=["short", "empty", "digit-7", "letter", "path-in-question", "no-goal", "two-starts"])
def test_bad_grids_are_invalid_arguments_naming_grid(task, grid, says):
    with pytest.raises(InvalidArgument, match=says) as raised:
        parse_task_name(task).encode(grid)
    assert raised.value.field == "grid"


# --- the shared segment loop: Solve reproduces evaluate() ---------------------------------------

def _rates(final, curves, data: PuzzleBatch, task: GridTask) -> dict:
    """evaluate()'s fields recomputed from Solve answers, by comparing grid strings: `final`
    gives the answers and segments used, `curves` (paper-mode solutions) the per-segment
    predictions (evaluate() reports the curve over every segment in both modes)."""
    labels = [task.decode(row) for row in data.labels.numpy()]
    inputs = [task.decode(row) for row in data.inputs.numpy()]
    n, cells = len(labels), len(labels) * task.cells

    def right(grid, label, where=None):
        return sum(grid[i] == label[i] for i in (where if where is not None else range(len(label))))

    changed = [[i for i in range(task.cells) if q[i] != lab[i]]
               for q, lab in zip(inputs, labels, strict=True)]
    pairs = list(zip(final, labels, strict=True))
    segments = len(curves[0].segments)
    return {
        "exact_accuracy": sum(s.grid == lab for s, lab in pairs) / n,
        "cell_accuracy": sum(right(s.grid, lab) for s, lab in pairs) / cells,
        "changed_cell_accuracy": sum(right(s.grid, lab, ch) for (s, lab), ch
                                     in zip(pairs, changed, strict=True))
        / sum(len(ch) for ch in changed),
        "mean_segments": sum(s.segments_used for s in final) / n,
        "exact_by_segment": [sum(c.segments[k].grid == lab for c, lab
                                 in zip(curves, labels, strict=True)) / n
                             for k in range(segments)],
        "cell_by_segment": [sum(right(c.segments[k].grid, lab) for c, lab
                                in zip(curves, labels, strict=True)) / cells
                            for k in range(segments)],
    }


def _manual_predictions(model, data: PuzzleBatch, segments: int) -> torch.Tensor:
    """[S, B, L] argmax predictions from calling the model segment by segment (no shared code)."""
    with torch.no_grad():
        carry = model.initial_carry(len(data))
        predictions = []
        for _ in range(segments):
            carry, output = model(carry, data.inputs, data.puzzle_identifiers)
            predictions.append(output.logits.argmax(-1))
    return torch.stack(predictions)


@pytest.mark.parametrize("name", ["trm-sudoku6", "hrm-sudoku6"])
async def test_solve_reproduces_the_held_out_evaluation_in_both_modes(models_dir, solver_for,
                                                                      name):
    registry = ModelRegistry.load(models_dir, "cpu")
    model = registry.get(name)
    task = model.task
    data = held_out_set(SUDOKU6, 24, seed=HELD_OUT_SEED)
    # Half the labels are the model's own predictions after segment 2, so the exact rates are
    # not trivially zero (evaluate() takes labels as given).
    manual = _manual_predictions(model.module, data, SEGMENTS)
    assert int(manual.min()) >= 2  # digits only: grid strings map 1:1 to tokens
    labels = data.labels.clone()
    labels[::2] = manual[1, ::2]
    data = PuzzleBatch(data.inputs, labels, data.puzzle_identifiers)
    solver = solver_for(registry, max_wait_ms=20)
    puzzles = [task.decode(row) for row in data.inputs.numpy()]

    paper = await asyncio.gather(*(solver.solve(name, p, "paper", SEGMENTS) for p in puzzles))
    act = await asyncio.gather(*(solver.solve(name, p, "act", SEGMENTS) for p in puzzles))
    for mode, final in (("paper", paper), ("act", act)):
        expected = evaluate(model.module, data, SEGMENTS, mode, batch_size=7)
        for key, value in _rates(final, paper, data, task).items():
            assert value == pytest.approx(getattr(expected, key), abs=1e-12), (mode, key)
        assert expected.exact_by_segment[1] == 0.5
    assert 1 < expected.mean_segments < SEGMENTS  # ACT stops differ between puzzles
    for solution, column in zip(paper, manual.transpose(0, 1), strict=True):
        assert solution.segments_used == SEGMENTS
        assert [s.grid for s in solution.segments] == [task.decode(p) for p in column]
    assert all(s.model.name == name and s.latency_ms > 0 for s in paper + act)
    assert solver.batcher(name).forward_passes < 2 * len(puzzles)


async def test_act_stops_each_puzzle_at_its_first_halt(models_dir, solver_for):
    registry = ModelRegistry.load(models_dir, "cpu")
    for name in ("trm-sudoku6", "hrm-sudoku6"):
        model = registry.get(name)
        data = held_out_set(SUDOKU6, 12, seed=5)
        with torch.no_grad():
            carry = model.module.initial_carry(len(data))
            halts, probabilities = [], []
            for _ in range(SEGMENTS):
                carry, output = model.module(carry, data.inputs, data.puzzle_identifiers)
                q_continue = getattr(output, "q_continue_logits", None)
                halts.append(output.q_halt_logits > (0 if q_continue is None else q_continue))
                probabilities.append(torch.sigmoid(output.q_halt_logits))
        halts = torch.stack(halts).T  # [B, S]
        solver = solver_for(registry)
        for row, puzzle in enumerate(data.inputs.numpy()):
            solution = await solver.solve(name, model.task.decode(puzzle), "act", SEGMENTS)
            first = next((s + 1 for s in range(SEGMENTS) if halts[row, s]), SEGMENTS)
            assert solution.segments_used == first == len(solution.segments)
            assert solution.grid == solution.segments[-1].grid
            for k, segment in enumerate(solution.segments):
                assert segment.halt_probability == pytest.approx(float(probabilities[k][row]),
                                                                 abs=1e-6)
            assert solution.halt_probability == solution.segments[-1].halt_probability


async def test_the_default_segments_are_the_models_halt_max_steps(models_dir, solver_for):
    solver = solver_for(ModelRegistry.load(models_dir, "cpu"))
    solution = await solver.solve("trm-maze5", "S" + " " * 23 + "G")
    assert solution.segments_used == SEGMENTS
    assert set(solution.grid) <= set(maze_lib.CHARSET + PADDING_CHAR)
    one = await solver.solve("trm-maze5", "S" + " " * 23 + "G", "paper", 1)
    assert one.segments_used == 1 and one.segments[0] == solution.segments[0]


async def test_concurrent_solves_share_forward_passes_and_equal_solving_alone(models_dir,
                                                                             solver_for):
    registry = ModelRegistry.load(models_dir, "cpu")
    data = held_out_set(SUDOKU6, 10, seed=8)
    task = registry.get("trm-sudoku6").task
    puzzles = [task.decode(row) for row in data.inputs.numpy()]
    together = solver_for(registry, max_wait_ms=200)
    modes = ["act" if i % 2 else "paper" for i in range(len(puzzles))]
    budgets = [1 + i % SEGMENTS for i in range(len(puzzles))]
    batched = await asyncio.gather(*(together.solve("trm-sudoku6", p, m, b) for p, m, b
                                     in zip(puzzles, modes, budgets, strict=True)))
    assert together.batcher("trm-sudoku6").forward_passes < len(puzzles)
    alone = solver_for(registry, max_wait_ms=0)
    for puzzle, mode, budget, solution in zip(puzzles, modes, budgets, batched, strict=True):
        single = await alone.solve("trm-sudoku6", puzzle, mode, budget)
        assert [s.grid for s in single.segments] == [s.grid for s in solution.segments]
        assert single.segments_used == solution.segments_used <= budget
        np.testing.assert_allclose([s.halt_probability for s in single.segments],
                                   [s.halt_probability for s in solution.segments], atol=1e-5)


# --- errors ------------------------------------------------------------------------------------

async def test_bad_requests_name_the_field(models_dir, solver_for):
    registry = ModelRegistry.load(models_dir, "cpu")
    solver = solver_for(registry)
    grid = "." * 36
    for name in ("", "trm-sudoku9"):
        with pytest.raises(InvalidArgument) as raised:
            await solver.solve(name, grid)
        assert raised.value.field == "model"
    for segments in (0, MAX_SEGMENTS + 1, -3):
        with pytest.raises(InvalidArgument) as raised:
            await solver.solve("trm-sudoku6", grid, "paper", segments)
        assert raised.value.field == "max_segments"
    with pytest.raises(InvalidArgument) as raised:
        await solver.solve("trm-sudoku6", grid[:-1])
    assert raised.value.field == "grid"
    with pytest.raises(FailedPrecondition, match="not a reasoning model"):
        await solver.solve("connect4-pv", grid)
    assert (await solver.solve("trm-sudoku6", grid, "act", MAX_SEGMENTS)).segments_used >= 1


async def test_a_reasoning_model_without_a_task_and_an_empty_registry(tmp_path, solver_for):
    save_checkpoint(tmp_path / "bare-trm", tiny_trm(), "trm", {"note": "no task"})
    registry = ModelRegistry.load(tmp_path, "cpu")
    assert registry.get("bare-trm").task is None and registry.get("bare-trm").task_name == ""
    with pytest.raises(FailedPrecondition, match="no task"):
        await solver_for(registry).solve("bare-trm", "." * 36)
    with pytest.raises(Unavailable):
        await solver_for(ModelRegistry.load(tmp_path / "none", "cpu")).solve("x", "." * 36)


def test_a_task_that_does_not_fit_the_config_is_refused_at_load(tmp_path):
    save_checkpoint(tmp_path / "wrong", tiny_trm(), "trm", _metadata(SudokuTask(size=9)))
    with pytest.raises(CheckpointError, match="sudoku-9x9 needs vocab_size 11"):
        ModelRegistry.load(tmp_path, "cpu")


def test_every_model_warms_up(models_dir):
    registry = ModelRegistry.load(models_dir, "cpu")
    for model in registry.list():
        warm_up(model)
    assert {m.name: m.task_name for m in registry.list()} == {
        "connect4-pv": "", "hrm-sudoku6": "sudoku-6x6", "trm-maze5": "maze-5x5",
        "trm-sudoku6": "sudoku-6x6"}


# --- reload ------------------------------------------------------------------------------------

def _corrupt_weights(directory):
    data = bytearray((directory / WEIGHTS_FILE).read_bytes())
    data[-5] ^= 0xFF
    (directory / WEIGHTS_FILE).write_bytes(bytes(data))


def _bad_json(directory):
    (directory / CONFIG_FILE).write_text("{ not json")


def _unreadable_safetensors(directory):
    (directory / WEIGHTS_FILE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}garbage")
    _update_hash(directory)


def _mismatched_config(directory):
    document = json.loads((directory / CONFIG_FILE).read_text())
    document["config"]["hidden_size"] = 64
    (directory / CONFIG_FILE).write_text(json.dumps(document))


def _mismatched_weights(directory):
    # A different model's weights with a hash that matches them: the config does not fit.
    save_checkpoint(directory.parent / "other", tiny_trm(MAZE, mlp_t=False), "trm", {})
    (directory / WEIGHTS_FILE).write_bytes((directory.parent / "other" / WEIGHTS_FILE).read_bytes())
    _update_hash(directory)


def _update_hash(directory):
    import hashlib

    document = json.loads((directory / CONFIG_FILE).read_text())
    document["weights"]["sha256"] = hashlib.sha256((directory / WEIGHTS_FILE).read_bytes()
                                                   ).hexdigest()
    (directory / CONFIG_FILE).write_text(json.dumps(document))


@pytest.mark.parametrize("damage, says", [
    (_corrupt_weights, "SHA-256"), (_bad_json, "not valid JSON"),
    (_unreadable_safetensors, "not a readable safetensors"),
    (_mismatched_config, "do not match"), (_mismatched_weights, "do not match"),
], ids=["hash-mismatch", "bad-json", "bad-safetensors", "config-mismatch", "weights-mismatch"])
async def test_a_bad_reload_is_refused_and_the_old_model_keeps_serving(models_dir, solver_for,
                                                                       damage, says):
    registry = ModelRegistry.load(models_dir, "cpu")
    solver = solver_for(registry)
    grid = "12" + "." * 34
    before = await solver.solve("trm-sudoku6", grid, "paper", 2)
    damage(models_dir / "trm-sudoku6")
    with pytest.raises(CheckpointError, match=says):
        registry.reload("trm-sudoku6", warm_up)
    after = await solver.solve("trm-sudoku6", grid, "paper", 2)
    assert after.model is before.model and after.segments == before.segments


async def test_reload_serves_the_new_version_and_adds_new_directories(models_dir, solver_for):
    registry = ModelRegistry.load(models_dir, "cpu")
    solver = solver_for(registry)
    grid = "12" + "." * 34
    old = await solver.solve("trm-sudoku6", grid, "paper", 2)
    old_batcher = solver.batcher("trm-sudoku6")
    version = _save(models_dir / "trm-sudoku6", tiny_trm(seed=5), "trm", SUDOKU6)
    reloaded = registry.reload("trm-sudoku6", warm_up)
    assert reloaded.version == version != old.model.version
    new = await solver.solve("trm-sudoku6", grid, "paper", 2)
    assert new.model.version == version
    assert solver.batcher("trm-sudoku6") is not old_batcher
    for _ in range(100):  # the retired batcher closes once idle
        if old_batcher._closed:
            break
        await asyncio.sleep(0.01)
    assert old_batcher._closed

    with pytest.raises(InvalidArgument):
        await solver.solve("trm-sudoku6b", grid)
    _save(models_dir / "trm-sudoku6b", tiny_trm(seed=6), "trm", SUDOKU6)
    assert registry.reload("trm-sudoku6b").task_name == "sudoku-6x6"
    assert (await solver.solve("trm-sudoku6b", grid, "paper", 1)).model.name == "trm-sudoku6b"
    for name in ("missing", "../models", ".hidden", ""):
        with pytest.raises(NotFound):
            registry.reload(name)


def test_run_segments_refuses_an_empty_batch_or_no_segments():
    model = tiny_trm()
    with pytest.raises(ValueError):
        run_segments(model, torch.zeros(0, 36, dtype=torch.int32),
                     torch.zeros(0, dtype=torch.int32), 2, False)
    with pytest.raises(ValueError):
        run_segments(model, torch.ones(1, 36, dtype=torch.int32),
                     torch.zeros(1, dtype=torch.int32), 0, False)


def test_run_segments_runs_in_inference_mode():
    """Outputs are inference tensors (no autograd graph kept, numpy() works on them)."""
    run = run_segments(tiny_trm().eval(), torch.ones(2, 36, dtype=torch.int32),
                       torch.zeros(2, dtype=torch.int32), 2, False)
    assert run.predictions.is_inference() and run.q_halt_logits.is_inference()
    run.halt_probabilities.numpy()


class CountingModel(torch.nn.Module):
    """A fake reasoning model whose answers are obvious: the carry counts segments, every cell
    predicts that count, and a row halts (q_halt > 0) from the segment given by its first token."""

    config = None

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))

    def initial_carry(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch)

    def forward(self, carry, inputs, puzzle_identifiers):
        from types import SimpleNamespace

        carry = carry + 1
        logits = torch.nn.functional.one_hot(carry.long(), 16).float()
        logits = logits[:, None, :].expand(len(inputs), inputs.shape[1], 16)
        return carry, SimpleNamespace(logits=logits,
                                      q_halt_logits=carry - inputs[:, 0].float() + 0.5)


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the tensor operations that copy a value to the host (a sync on a GPU)."""

    READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "cpu", "numpy"}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


def test_a_paper_batch_reads_nothing_back_until_the_end():
    inputs = torch.tensor([[2, 1], [3, 1], [5, 1]], dtype=torch.int32)
    with HostReads() as counter:
        run = run_segments(CountingModel(), inputs, torch.zeros(3, dtype=torch.int32), 8, False)
    assert counter.reads == []
    assert run.predictions.shape == (8, 3, 2) and run.segments_used.tolist() == [8, 8, 8]
    assert run.answers[:, 0].tolist() == [8, 8, 8]


@pytest.mark.parametrize("lag", [0, 1, 2])
def test_a_late_stop_check_gives_the_same_answers_and_at_most_lag_more_segments(lag):
    inputs = torch.tensor([[2, 1], [3, 1], [5, 1]], dtype=torch.int32)
    ids = torch.zeros(3, dtype=torch.int32)
    with HostReads() as counter:
        run = run_segments(CountingModel(), inputs, ids, torch.tensor([8, 8, 4]),
                           torch.tensor([True, True, True]), stop_check_lag=lag)
    assert run.segments_used.tolist() == [2, 3, 4]  # the last row stops at its max_segments
    assert run.answers[:, 0].tolist() == [2, 3, 4]
    assert run.predictions.shape[0] == 4 + lag
    # bounds and "any act row" read from the host tensors, then each segment's flag `lag`
    # segments later (none is read for the last `lag` segments run)
    assert counter.reads.count("tolist") == 1
    assert counter.reads.count("__bool__") == 1 + run.predictions.shape[0] - lag
    full = run_segments(CountingModel(), inputs, ids, torch.tensor([8, 8, 4]),
                        torch.tensor([True, True, True]), stop_early=False)
    assert full.predictions.shape[0] == 8 and full.segments_used.tolist() == [2, 3, 4]
    mixed = run_segments(CountingModel(), inputs, ids, 6, torch.tensor([True, False, True]),
                         stop_check_lag=lag)
    assert mixed.segments_used.tolist() == [2, 6, 5]
