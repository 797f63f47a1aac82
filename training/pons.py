"""Measures a Connect Four policy/value network on Pascal Pons' benchmark positions (exact scores),
the strength numbers a trained checkpoint records in its metadata.

For each position (`<moves> <score>`, score for the player to move):
- value sign: on decisive positions (score != 0), the share where sign(value) = sign(score); and
  the three-way share where the value's band (win > 1/3, loss < -1/3, else draw) is the outcome;
- policy: the share where the network's most probable column keeps the game-theoretic outcome
  (`libs.connect4.outcome.keeps_outcome`), beside the same share for a uniformly random legal
  column (the baseline any learning must beat); both also on the positions that are not lost,
  since in a lost position every move keeps the outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from libs.connect4.board import Position, encode, legal_mask
from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from libs.data import REPO_DATA
from services.neural.models.connect4_pv import Connect4PV, predict

DEFAULT_PONS_DIR = REPO_DATA / "connect4-pons"
"""The repository's copy of Pons' files (`data/connect4-pons`)."""
BENCHMARK_FILES = ("Test_L3_R1", "Test_L2_R1")
DRAW_BAND = 1.0 / 3.0


def evaluate_file(model: Connect4PV, path: Path, lines: int) -> dict[str, Any]:
    """Metrics of `model` on the first `lines` positions of one Pons file (see module docstring)."""
    pairs = read_pons(path, lines)
    positions = [Position.from_moves(moves) for moves, _ in pairs]
    planes = np.stack([encode(p) for p in positions])
    legal = np.stack([legal_mask(p) for p in positions])
    policy, value = predict(model, planes, legal)
    scores = np.array([score for _, score in pairs])
    truth = np.sign(scores)
    decisive = truth != 0
    not_lost = truth >= 0
    band = np.where(value > DRAW_BAND, 1, np.where(value < -DRAW_BAND, -1, 0))
    keeps_argmax = []
    keeps_random = []
    for (moves, score), probabilities, mask in zip(pairs, policy, legal, strict=True):
        keeps_argmax.append(keeps_outcome(moves, int(np.argmax(probabilities)) + 1, score))
        columns = np.flatnonzero(mask)
        keeps_random.append(np.mean([keeps_outcome(moves, int(c) + 1, score) for c in columns]))
    return {
        "positions": len(pairs),
        "value_sign_accuracy_decisive": round(float(np.mean(np.sign(value[decisive])
                                                             == truth[decisive])), 4),
        "decisive_positions": int(decisive.sum()),
        "outcome_accuracy_3way": round(float(np.mean(band == truth)), 4),
        "argmax_keeps_outcome": round(float(np.mean(keeps_argmax)), 4),
        "random_move_keeps_outcome": round(float(np.mean(keeps_random)), 4),
        # In a lost position every move keeps the outcome; where the choice matters:
        "not_lost_positions": int(not_lost.sum()),
        "argmax_keeps_outcome_not_lost": round(float(np.mean(np.asarray(keeps_argmax)[not_lost])),
                                               4),
        "random_move_keeps_outcome_not_lost": round(
            float(np.mean(np.asarray(keeps_random)[not_lost])), 4),
    }


def evaluate_on_pons(model: Connect4PV, pons_dir: Path, lines: int = 200) -> dict[str, Any]:
    """`evaluate_file` on the first `lines` lines of Test_L3_R1 and Test_L2_R1 under `pons_dir`.

    Raises:
        FileNotFoundError: a file is missing.
    """
    model.eval()
    return {name: evaluate_file(model, pons_dir / name, lines) for name in BENCHMARK_FILES}
