"""Per-generation strength on Pascal Pons' public benchmark halves (exact scores; 7x6 only).

For the first `positions` lines of each file, the share of positions where the move chosen keeps
the game-theoretic outcome (`libs.connect4.outcome.keeps_outcome`, judged by the exact solver):
- "network": the network alone, its most probable legal column (one forward pass);
- "puct": PUCT with the network at `simulations` simulations (no noise, the most visited column),
  all positions searched at once (`games.search_many`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from libs.connect4.outcome import keeps_outcome
from libs.connect4.pons import read_pons
from training.az.games import STANDARD_GAME, Evaluator, SearchOptions, search_many


def pons_rates(evaluate: Evaluator, pons_dir: Path, files: tuple[str, ...], positions: int,
               simulations: int, leaves_per_search: int, c_puct: float) -> dict[str, Any]:
    """{file: {"positions", "network", "puct", "simulations"}} (rates in 0..1, 4 digits).

    Raises:
        FileNotFoundError: a benchmark file is missing (its path in the message).
    """
    out: dict[str, Any] = {}
    if positions == 0:
        return out
    options = SearchOptions(simulations=simulations, leaves_per_search=leaves_per_search,
                            c_puct=c_puct, dirichlet_alpha=None)
    for name in files:
        path = pons_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"Pons benchmark file {path} not found")
        pairs = read_pons(path, positions)
        roots = [STANDARD_GAME.from_moves(moves) for moves, _ in pairs]
        position = np.array([r[0] for r in roots], dtype=np.int64)
        mask = np.array([r[1] for r in roots], dtype=np.int64)
        policy, _ = evaluate(STANDARD_GAME.encode(position, mask), STANDARD_GAME.legal(mask))
        network = [keeps_outcome(moves, int(np.argmax(p)) + 1, score)
                   for (moves, score), p in zip(pairs, policy, strict=True)]
        results, _ = search_many(position, mask, np.zeros(len(pairs), dtype=np.int64),
                                 [evaluate], options, np.arange(len(pairs)),
                                 np.zeros(len(pairs)))
        puct = [keeps_outcome(moves, result.action + 1, score)
                for (moves, score), result in zip(pairs, results, strict=True)]
        out[name] = {"positions": len(pairs), "network": round(float(np.mean(network)), 4),
                     "puct": round(float(np.mean(puct)), 4), "simulations": simulations}
    return out
