"""The maze TRMs shipped in `models/` through the real neural service and orchestrator (port 0):
`mcts-mesh eval maze --agents trm` on the first held-out mazes of `mcts-mesh puzzles heldout maze`
(the trainer's held-out set) returns exactly the paths that the trainer's own evaluation of the
same checkpoint gets right, and that share is the one the shipped model was kept for (the full
1,000-maze rates are in each checkpoint's config.json and the README)."""

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
from training.reasoning.data import MazeTask, held_out_set
from training.reasoning.evaluation import evaluate

MODELS = Path(__file__).resolve().parents[3] / "models"
HELD_OUT_SEED = 1
"""`mcts-mesh train` holds out `held_out_set(task, 1000, seed + 1)` with its default seed 0."""
MAZES = 100
SEGMENTS = 8


def _shipped_maze_models() -> list[str]:
    return sorted(path.parent.name for path in MODELS.glob("trm-maze*/config.json"))


def test_maze_models_are_shipped():
    assert _shipped_maze_models(), f"no trm-maze* checkpoint in {MODELS}"


@pytest.mark.parametrize("name", _shipped_maze_models())
async def test_served_maze_trm_solves_what_the_trainer_evaluation_solves(name, tmp_path,
                                                                      served_eval):
    checkpoint = load_checkpoint(MODELS / name)
    task = MazeTask(**checkpoint.metadata["task"])
    held_out = held_out_set(task, MAZES, HELD_OUT_SEED)  # the first 100 of the 1,000-maze set
    torch.set_num_threads(1)
    trainer = evaluate(checkpoint.model, held_out, SEGMENTS, "paper")
    recorded = checkpoint.metadata["metrics"]["paper"]["exact_accuracy"]
    assert trainer.exact_accuracy >= recorded - 0.05, (trainer.exact_accuracy, recorded)

    models = tmp_path / "models"
    shutil.copytree(MODELS / name, models / name)
    held_out_file = tmp_path / "heldout.csv"
    assert cli.main(["puzzles", "heldout", "maze", "--rows", str(task.rows), "--cols",
                     str(task.cols), "--count", "1000", "--seed", str(HELD_OUT_SEED),
                     "--output", str(held_out_file)]) == 0
    neural_settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    servicers, ready = await neural_servicers(neural_settings)
    neural = await start_server("neural", neural_settings, servicers, ready)
    try:
        lines = await served_eval(neural.port, "paper", ["maze", str(held_out_file), "--limit",
                                                         str(MAZES), "--agents", "trm"])
    finally:
        await neural.stop(0)
    summary = lines[-1]
    assert summary["puzzles"] == MAZES
    assert summary["exact"] == summary["optimal"] == round(trainer.exact_accuracy * MAZES)
    assert summary["answered_by"] == {"trm": summary["exact"]}
    assert all(record["optimal"] for record in lines[:-1] if record["answered_by"] == "trm")
