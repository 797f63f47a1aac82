"""Held-out evaluation of HRM and TRM with a chosen number of test-time segments.

Modes (as the serving `Solve` RPC names them):
- "paper": every example runs exactly `segments` segments and the last prediction counts (the
  references evaluate at `halt_max_steps` segments without early halting);
- "act": an example stops at the first segment whose halting head says halt (TRM: q_halt > 0;
  HRM: q_halt > q_continue, as in training), or at `segments`, and the prediction of that
  segment counts.
The segment loop is `services.neural.reasoning_segments.run_segments`, the same one the serving
`Solve` RPC runs, so the service reproduces these rates on the same puzzles.
Both report the per-segment curve (exact and cell accuracy of the prediction after s = 1..segments
segments), so the gain from more test-time segments is read off directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from services.neural.models.reasoning_layers import IGNORE_LABEL_ID
from services.neural.reasoning_segments import MODES, run_segments
from training.reasoning.data import PuzzleBatch

EVALUATION_MODES = MODES


@dataclass(frozen=True)
class Evaluation:
    """Accuracies on a held-out set (fractions in [0, 1]).

    exact_accuracy: examples with every cell right. cell_accuracy: right cells over all cells.
    changed_cell_accuracy: over the cells the model must fill (label differs from input: the
    blanks of a Sudoku, the path of a maze). mean_segments: segments used per example.
    exact_by_segment / cell_by_segment: accuracy of the prediction after s = 1..segments segments.
    """

    mode: str
    segments: int
    puzzles: int
    exact_accuracy: float
    cell_accuracy: float
    changed_cell_accuracy: float
    mean_segments: float
    exact_by_segment: list[float]
    cell_by_segment: list[float]

    @property
    def segment_gain(self) -> float:
        """Exact accuracy after all segments minus after one."""
        return self.exact_by_segment[-1] - self.exact_by_segment[0]

    def as_dict(self) -> dict:
        return {**asdict(self), "segment_gain": self.segment_gain}


@torch.no_grad()
def evaluate(model: nn.Module, data: PuzzleBatch, segments: int, mode: str = "paper",
             batch_size: int = 256) -> Evaluation:
    """Evaluates `model` (an HRM or TRM; run in eval mode, its mode restored after) on `data`.

    Args:
        model: the module to evaluate; pass the EMA copy to evaluate averaged weights.
        data: inputs int [N, L], labels int [N, L].
        segments: test-time segments (>= 1); the most segments in "act" mode.
        mode: "paper" or "act".
        batch_size: examples per forward pass.
    Raises:
        ValueError: unknown mode, segments < 1, or empty data.
    """
    if mode not in EVALUATION_MODES:
        raise ValueError(f"unknown evaluation mode {mode!r}; expected one of {EVALUATION_MODES}")
    if segments < 1 or len(data) == 0:
        raise ValueError(f"need segments >= 1 and data, got {segments} and {len(data)} examples")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    # Counts stay on the device and come back in one transfer at the end (float64: exact).
    exact_by_segment = torch.zeros(segments, dtype=torch.float64, device=device)
    cell_by_segment = torch.zeros(segments, dtype=torch.float64, device=device)
    totals = torch.zeros(6, dtype=torch.float64, device=device)
    for start in range(0, len(data), batch_size):
        chunk = data.slice(start, start + batch_size).to(device)
        valid = chunk.labels != IGNORE_LABEL_ID
        valid_count = valid.sum(-1)
        changed = valid & (chunk.labels != chunk.inputs.long())
        run = run_segments(model, chunk.inputs, chunk.puzzle_identifiers, segments,
                           act=mode == "act", stop_early=False)
        right_by_segment = valid & (run.predictions == chunk.labels)  # [S, B, L]
        exact_by_segment += (right_by_segment.sum(-1) == valid_count).sum(-1)
        cell_by_segment += right_by_segment.sum((-2, -1))
        right = valid & (run.answers == chunk.labels)
        totals += torch.stack([(right.sum(-1) == valid_count).sum(), right.sum(),
                               (right & changed).sum(), changed.sum(), valid.sum(),
                               run.segments_used.sum()]).double()
    exact, cells, changed_right, changed_total, valid_total, used_segments = totals.tolist()
    model.train(was_training)
    count = len(data)
    return Evaluation(
        mode=mode, segments=segments, puzzles=count, exact_accuracy=exact / count,
        cell_accuracy=cells / max(valid_total, 1),
        changed_cell_accuracy=changed_right / max(changed_total, 1),
        mean_segments=used_segments / count,
        exact_by_segment=(exact_by_segment / count).tolist(),
        cell_by_segment=(cell_by_segment / max(valid_total, 1.0)).tolist())
