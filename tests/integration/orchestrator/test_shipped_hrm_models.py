"""The HRM checkpoints shipped in `models/` through the real neural service and orchestrator (port
0): `mcts-mesh eval --agents hrm` on the first held-out puzzles of `mcts-mesh puzzles heldout` (the
trainer's held-out set) returns exactly the answers the trainer's own evaluation of the same
checkpoint gets right, and the vote names the HRM checkpoint chosen by the blank-count rule; with
an HRM and a TRM for the same grid, a request naming AGENT_HRM gets the HRM's proposal and one
naming AGENT_TRM the TRM's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from libs.server import start_server
from mcts_mesh import cli
from services.neural.checkpoint import load_checkpoint
from services.neural.main import build_servicers as neural_servicers
from services.neural.settings import NeuralSettings
from training.reasoning.data import MazeTask, SudokuTask, held_out_set
from training.reasoning.evaluation import evaluate

MODELS = Path(__file__).resolve().parents[3] / "models"
HELD_OUT_SEED = 1
"""`mcts-mesh train` holds out `held_out_set(task, 1000, seed + 1)` with its default seed 0."""
PUZZLES = 50
SEGMENTS = 8


def _shipped_hrm_models() -> list[str]:
    return sorted(path.parent.name for path in MODELS.glob("hrm-*/config.json"))


def _task(metadata: dict) -> SudokuTask | MazeTask:
    if metadata["task_kind"] == "SudokuTask":
        return SudokuTask(**metadata["task"])
    return MazeTask(**metadata["task"])


def _held_out_file(task: SudokuTask | MazeTask, path: Path) -> list[str]:
    """Writes the trainer's held-out set to `path`; returns `eval`'s arguments for it."""
    if isinstance(task, SudokuTask):
        kind, sizes = "sudoku", ["--size", str(task.size), "--blanks", str(task.blanks)]
    else:
        kind, sizes = "maze", ["--rows", str(task.rows), "--cols", str(task.cols)]
    assert cli.main(["puzzles", "heldout", kind, *sizes, "--count", "1000", "--seed",
                     str(HELD_OUT_SEED), "--output", str(path)]) == 0
    return [kind, str(path), "--limit", str(PUZZLES)]


async def _served(models: Path, served_eval, arguments: list[str]) -> list[dict]:
    settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    servicers, ready = await neural_servicers(settings)
    neural = await start_server("neural", settings, servicers, ready)
    try:
        return await served_eval(neural.port, "paper", arguments)
    finally:
        await neural.stop(0)


def _vote(record: dict, agent: str) -> str:
    """The rationale of `agent`'s vote in an `eval` record (it names the checkpoint used)."""
    return next(vote["rationale"] for vote in record["votes"] if vote["agent"] == agent)


def test_hrm_models_are_shipped_beside_the_trm_ones():
    shipped = _shipped_hrm_models()
    assert {"hrm-sudoku6-b16", "hrm-sudoku6-b22", "hrm-maze9"} <= set(shipped), shipped


@pytest.mark.parametrize("name", _shipped_hrm_models())
async def test_served_hrm_solves_what_the_trainer_evaluation_solves(name, tmp_path, served_eval):
    checkpoint = load_checkpoint(MODELS / name)
    assert checkpoint.architecture == "hrm"
    task = _task(checkpoint.metadata)
    torch.set_num_threads(1)
    trainer = evaluate(checkpoint.model, held_out_set(task, PUZZLES, HELD_OUT_SEED), SEGMENTS,
                       "paper")
    solved = round(trainer.exact_accuracy * PUZZLES)
    recorded = checkpoint.metadata["metrics"]["paper"]["exact_accuracy"]
    assert abs(trainer.exact_accuracy - recorded) <= 0.15, (trainer.exact_accuracy, recorded)

    models = tmp_path / "models"
    shutil.copytree(MODELS / name, models / name)
    arguments = _held_out_file(task, tmp_path / "heldout.csv")
    lines = await _served(models, served_eval, [*arguments, "--agents", "hrm"])
    summary, records = lines[-1], lines[:-1]
    assert summary["puzzles"] == PUZZLES
    assert summary["exact"] == solved
    assert summary["answered_by"] == {"hrm": solved}
    answered = [record for record in records if record["answered_by"] == "hrm"]
    assert all(_vote(record, "hrm").startswith(f"{name} ") for record in answered)
    assert set(summary["errors"]) <= {"FAILED_PRECONDITION"}  # the checker's rejections


async def test_blank_count_rule_and_named_agents_pick_hrm_and_trm_alike(tmp_path, served_eval):
    """With HRM and TRM checkpoints at 16 and 22 blanks in one registry, 22-blank puzzles named
    to AGENT_HRM go to hrm-sudoku6-b22 and named to AGENT_TRM to trm-sudoku6-b22 (the nearest
    training blank count), each answered by the agent named."""
    names = ("hrm-sudoku6-b16", "hrm-sudoku6-b22", "trm-sudoku6-b16", "trm-sudoku6-b22")
    models = tmp_path / "models"
    for name in names:
        if not (MODELS / name).is_dir():
            pytest.fail(f"{name} is not shipped in {MODELS}")
        shutil.copytree(MODELS / name, models / name)
    arguments = _held_out_file(SudokuTask(size=6, blanks=22), tmp_path / "b22.csv")
    for agent in ("hrm", "trm"):
        lines = await _served(models, served_eval, [*arguments, "--agents", agent])
        summary, records = lines[-1], lines[:-1]
        assert summary["answered_by"] == {agent: summary["valid"]} and summary["valid"] > 0
        for record in records:
            if record["answered_by"]:
                assert _vote(record, agent).startswith(f"{agent}-sudoku6-b22 "), record
