"""The serving path reproduces the trainer's rates: a tiny TRM trained here on 6x6 Sudoku, loaded by
the real neural service (port 0) from its checkpoint, asked through the real orchestrator by
`mcts-mesh eval sudoku --agents trm` on `mcts-mesh puzzles heldout`'s file, solves exactly the
share of the held-out puzzles that the trainer's own evaluation reports, in both halting modes."""

from __future__ import annotations

import asyncio
import shutil

import torch

from libs.server import start_server
from mcts_mesh import cli
from services.neural.main import build_servicers as neural_servicers
from services.neural.models.trm import TRM, TRMConfig
from services.neural.settings import NeuralSettings
from training.reasoning.data import SudokuTask, held_out_set
from training.reasoning.loop import TrainingSettings, train

TASK = SudokuTask(size=6, blanks=2)
HELD_OUT_SEED = 21


def trained_checkpoint(directory) -> dict[str, float]:
    """Trains the CI-sized TRM (see test_reasoning_training) and returns its held-out exact rates
    by mode; the checkpoint lands in `directory / "checkpoint"`."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TRM(TRMConfig(vocab_size=TASK.vocab_size, seq_len=TASK.seq_len, hidden_size=64,
                          num_heads=2, layers=1, h_cycles=2, l_cycles=2, mlp_t=True,
                          pos_encodings="none", puzzle_emb_ndim=64, puzzle_emb_len=1,
                          halt_max_steps=3))
    settings = TrainingSettings(steps=60, batch_size=32, seed=3, lr=1e-2, puzzle_emb_lr=1e-2,
                                warmup_steps=5, ema_rate=None, eval_every=0, progress=False)
    result = train(model, "trm", TASK, settings, directory,
                   held_out=held_out_set(TASK, 100, HELD_OUT_SEED))
    return {"paper": result.paper.exact_accuracy, "act": result.act.exact_accuracy}


async def test_served_trm_solves_the_share_the_trainer_reports(tmp_path, served_eval):
    rates = await asyncio.to_thread(trained_checkpoint, tmp_path / "run")
    assert rates["paper"] >= 0.5  # a model that learned something: the comparison means a lot
    models = tmp_path / "models"
    shutil.copytree(tmp_path / "run" / "checkpoint", models / "trm-tiny-sudoku6")
    held_out_file = tmp_path / "heldout.csv"
    assert cli.main(["puzzles", "heldout", "sudoku", "--size", "6", "--blanks", "2", "--count",
                     "100", "--seed", str(HELD_OUT_SEED), "--output", str(held_out_file)]) == 0

    neural_settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    servicers, ready = await neural_servicers(neural_settings)
    neural = await start_server("neural", neural_settings, servicers, ready)
    try:
        for mode in ("paper", "act"):
            lines = await served_eval(neural.port, mode, ["sudoku", str(held_out_file),
                                                          "--agents", "trm"])
            summary = lines[-1]
            assert summary["puzzles"] == 100
            assert summary["exact_rate"] == summary["valid_rate"] == rates[mode], mode
            assert summary["answered_by"] == {"trm": round(rates[mode] * 100)}
            assert all(record["answered_by"] == "trm" for record in lines[:-1]
                       if record["valid"])
    finally:
        await neural.stop(0)
