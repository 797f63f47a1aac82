"""Held-out evaluation of HRM and TRM with a chosen number of test-time segments.

Modes (as the serving `Solve` RPC names them):
- "paper": every example runs exactly `segments` segments and the last prediction counts (the
  references evaluate at `halt_max_steps` segments without early halting);
- "act": an example stops at the first segment whose halting logit is > 0 (or at `segments`),
  and the prediction of that segment counts.
Both report the per-segment curve (exact and cell accuracy of the prediction after s = 1..segments
segments), so the gain from more test-time segments is read off directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from services.neural.models.reasoning_layers import IGNORE_LABEL_ID
from services.neural.training.act import autocast
from services.neural.training.reasoning_data import PuzzleBatch

EVALUATION_MODES = ("paper", "act")


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
    exact_by_segment = torch.zeros(segments, dtype=torch.float64)
    cell_by_segment = torch.zeros(segments, dtype=torch.float64)
    exact = cells = changed_right = changed_total = used_segments = 0.0
    valid_total = 0
    for start in range(0, len(data), batch_size):
        chunk = data.slice(start, start + batch_size).to(device)
        valid = chunk.labels != IGNORE_LABEL_ID
        changed = valid & (chunk.labels != chunk.inputs.long())
        carry = model.initial_carry(len(chunk))
        chosen = torch.zeros_like(chunk.labels)
        stopped = torch.zeros(len(chunk), dtype=torch.bool, device=device)
        used = torch.full((len(chunk),), segments, dtype=torch.float64, device=device)
        for segment in range(segments):
            with autocast(device):
                carry, output = model(carry, chunk.inputs, chunk.puzzle_identifiers)
            prediction = output.logits.argmax(-1)
            right = valid & (prediction == chunk.labels)
            exact_by_segment[segment] += (right.sum(-1) == valid.sum(-1)).sum().item()
            cell_by_segment[segment] += right.sum().item()
            take = ~stopped
            chosen[take] = prediction[take]
            if mode == "act":
                halting = take & (output.q_halt_logits.float() > 0)
                used[halting] = segment + 1
                stopped |= halting
        right = valid & (chosen == chunk.labels)
        exact += (right.sum(-1) == valid.sum(-1)).sum().item()
        cells += right.sum().item()
        changed_right += (right & changed).sum().item()
        changed_total += changed.sum().item()
        valid_total += int(valid.sum())
        used_segments += used.sum().item()
    model.train(was_training)
    count = len(data)
    return Evaluation(
        mode=mode, segments=segments, puzzles=count, exact_accuracy=exact / count,
        cell_accuracy=cells / max(valid_total, 1),
        changed_cell_accuracy=changed_right / max(changed_total, 1),
        mean_segments=used_segments / count,
        exact_by_segment=(exact_by_segment / count).tolist(),
        cell_by_segment=(cell_by_segment / max(valid_total, 1)).tolist())
