"""The test-time segment loop of HRM and TRM, shared by held-out evaluation
(`services.neural.training.reasoning_eval.evaluate`) and serving (`reasoning_solver`), so both
produce the same predictions from the same puzzles.

Each example starts from the model's initial carry and runs deep-supervision segments on the same
inputs, the carry passed from one segment to the next, as in the references' evaluation
(sapientinc/HRM and TinyRecursiveModels `pretrain.py` `evaluate`: the ACT wrapper in eval mode,
looped until every example halts at `halt_max_steps`). Per example:
- "paper" (no early halt): run `max_segments` segments; the last prediction is the answer;
- "act": stop at the first segment whose halting head says halt (TRM: q_halt > 0, that is
  sigmoid(q_halt) > 0.5, paper section 4.6; HRM: q_halt > q_continue, HRM section 2 "Adaptive
  computational time"), or at `max_segments`; that segment's prediction is the answer.
A prediction is the argmax token of each cell's logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from services.neural.training.act import autocast

MODES = ("paper", "act")


@dataclass(frozen=True)
class SegmentRun:
    """The outputs of `run_segments` for B examples over the S segments run.

    predictions: int64 [S, B, L], the argmax token after each segment.
    q_halt_logits: float32 [S, B], the halting logit after each segment.
    halts: bool [S, B], the halting head's decision after each segment (see the module).
    segments_used: int64 [B] in 1..S, segments that count for each example: its max_segments in
        "paper" mode, the first halting segment (or its max_segments) in "act" mode.
    Rows keep running in the batch after their own stop (their later outputs are not used).
    """

    predictions: torch.Tensor
    q_halt_logits: torch.Tensor
    halts: torch.Tensor
    segments_used: torch.Tensor

    @property
    def answers(self) -> torch.Tensor:
        """int64 [B, L]: each example's prediction at its segment `segments_used`."""
        rows = torch.arange(self.predictions.shape[1], device=self.predictions.device)
        return self.predictions[self.segments_used - 1, rows]

    @property
    def halt_probabilities(self) -> torch.Tensor:
        """float32 [S, B]: sigmoid(q_halt), the halting head's estimate that the prediction is
        exactly right."""
        return torch.sigmoid(self.q_halt_logits)


def halting_decision(output) -> torch.Tensor:
    """bool [B]: whether a segment's output (`TRMOutput` or `HRMOutput`) says halt."""
    q_halt = output.q_halt_logits.float()
    q_continue = getattr(output, "q_continue_logits", None)
    if q_continue is None:
        return q_halt > 0
    return q_halt > q_continue.float()


@torch.no_grad()
def run_segments(model: nn.Module, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor,
                 max_segments: torch.Tensor | int, act: torch.Tensor | bool,
                 stop_early: bool = True) -> SegmentRun:
    """Runs up to max(max_segments) segments of `model` (an HRM or TRM, used as it is: call
    `.eval()` first) on a batch, under bf16 autocast on CUDA as in training.

    Args:
        inputs: int [B, L] token ids on the model's device.
        puzzle_identifiers: int [B].
        max_segments: int [B] (or one int for all), each >= 1: the most segments per example.
        act: bool [B] (or one bool): "act" mode for that example, else "paper".
        stop_early: stop once every example has stopped; False runs all max(max_segments)
            segments (evaluation's per-segment curve).
    Raises:
        ValueError: an empty batch or a max_segments below 1.
    """
    batch = inputs.shape[0]
    device = inputs.device
    if batch == 0:
        raise ValueError("run_segments needs at least one example")
    max_segments = torch.as_tensor(max_segments, dtype=torch.int64, device=device).expand(batch)
    act = torch.as_tensor(act, dtype=torch.bool, device=device).expand(batch)
    if int(max_segments.min()) < 1:
        raise ValueError(f"max_segments must be >= 1, got {max_segments.tolist()}")
    carry = model.initial_carry(batch)
    predictions, q_halts, halts = [], [], []
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    used = max_segments.clone()
    for segment in range(1, int(max_segments.max()) + 1):
        with autocast(device):
            carry, output = model(carry, inputs, puzzle_identifiers)
        halt = halting_decision(output)
        predictions.append(output.logits.argmax(-1))
        q_halts.append(output.q_halt_logits.float())
        halts.append(halt)
        halting = ~stopped & act & halt
        used = torch.where(halting, torch.full_like(used, segment), used)
        stopped |= halting | (max_segments <= segment)
        if stop_early and bool(stopped.all()):
            break
    return SegmentRun(predictions=torch.stack(predictions), q_halt_logits=torch.stack(q_halts),
                      halts=torch.stack(halts), segments_used=used)
