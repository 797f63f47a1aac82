"""CI-sized learning for HRM: a tiny HRM, trained by the same loop as the shipped checkpoints (deep
supervision, the one-step gradient, the Q-learning halting head, AdamATan2, no EMA), goes from
solving none of 100 held-out easy 6x6 Sudoku to solving a good share of them in 200 steps (about
20 s of one CPU core)."""

from __future__ import annotations

import torch

from services.neural.models.hrm import HRM, HRMConfig
from training.reasoning.data import SudokuTask, held_out_set
from training.reasoning.evaluation import evaluate
from training.reasoning.loop import TrainingSettings, train

TASK = SudokuTask(size=6, blanks=2)
SEGMENTS = 2


def tiny_hrm() -> HRM:
    """Hidden 64, one H and one L layer, 1 x 2 cycles, at most 2 segments: 132,226 parameters."""
    torch.manual_seed(0)
    return HRM(HRMConfig(vocab_size=TASK.vocab_size, seq_len=TASK.seq_len, hidden_size=64,
                         num_heads=2, h_layers=1, l_layers=1, h_cycles=1, l_cycles=2,
                         puzzle_emb_ndim=64, halt_max_steps=SEGMENTS))


def test_a_tiny_hrm_learns_easy_six_by_six_sudoku():
    """200 steps (batch 32, lr 1e-3: 3e-3 and 1e-2 learned far less in this many steps) on 6x6
    Sudoku with 2 blanks: from 0% exact to at least 25% of 100 held-out puzzles with every cell
    right (40% on the reference machine, 50% when the halting head stops it) and most blanks
    filled right (0.6 of them; 0.0-0.1 before training)."""
    torch.set_num_threads(1)
    model = tiny_hrm()
    held_out = held_out_set(TASK, 100, seed=21)
    untrained = evaluate(model, held_out, SEGMENTS, "paper")
    settings = TrainingSettings(steps=200, batch_size=32, seed=3, lr=1e-3, puzzle_emb_lr=1e-3,
                                warmup_steps=5, ema_rate=None, eval_every=0,
                                eval_segments=SEGMENTS, progress=False)
    result = train(model, "hrm", TASK, settings, None, held_out=held_out)
    assert untrained.exact_accuracy == 0.0 and untrained.changed_cell_accuracy < 0.2
    assert result.paper.exact_accuracy >= 0.25, result.paper
    assert result.paper.changed_cell_accuracy >= 0.5, result.paper
    assert result.act.exact_accuracy >= 0.25, result.act
