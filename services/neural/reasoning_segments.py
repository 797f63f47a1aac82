"""The test-time segment loop of HRM and TRM, shared by held-out evaluation
(`training.reasoning.evaluation.evaluate`) and serving (`reasoning_solver`), so both
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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from services.neural.models.precision import autocast

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


STOP_CHECK_LAG_CUDA = 1
"""On CUDA, the early stop reads whether every example had stopped one segment late: the flag is
copied to pinned host memory without blocking and read once the next segment is queued, so the
host never drains the GPU's queue to decide (at most one extra segment runs; its outputs are
not part of any answer)."""


def _bounds(max_segments: torch.Tensor | int) -> tuple[int, int]:
    """(min, max) of max_segments, read on the host: free for an int or a CPU tensor, one
    transfer for a tensor on a device."""
    if isinstance(max_segments, int):
        return max_segments, max_segments
    low, high = torch.aminmax(max_segments.reshape(-1))
    low, high = torch.stack((low, high)).tolist()
    return int(low), int(high)


def _any_act(act: torch.Tensor | bool) -> bool:
    return bool(act) if isinstance(act, bool) else bool(act.any())


class _StopFlags:
    """Whether every example has stopped, asked after each segment and answered `lag` segments
    later without a blocking read of the current segment's result (see STOP_CHECK_LAG_CUDA)."""

    def __init__(self, device: torch.device, lag: int) -> None:
        self.device = device
        self.lag = lag
        self.pending: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []

    def push(self, stopped: torch.Tensor) -> None:
        if self.device.type == "cuda":
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(stopped.all(), non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self.pending.append((host, event))
        else:
            self.pending.append((stopped.all(), None))

    def all_stopped(self) -> bool:
        """The answer for the segment `lag` segments back (False until there is one)."""
        if len(self.pending) <= self.lag:
            return False
        host, event = self.pending.pop(0)
        if event is not None:
            event.synchronize()
        return bool(host)


def _check_batch(batch: int, max_segments: torch.Tensor | int) -> int:
    """The most segments any example may run.

    Raises:
        ValueError: an empty batch or a max_segments below 1.
    """
    if batch == 0:
        raise ValueError("run_segments needs at least one example")
    lowest, most = _bounds(max_segments)
    if lowest < 1:
        raise ValueError(f"max_segments must be >= 1, got {lowest}")
    return most


def _per_example(max_segments: torch.Tensor | int, act: torch.Tensor | bool,
                 device: torch.device, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`max_segments` as int64 [B] and `act` as bool [B] on `device`."""
    return (torch.as_tensor(max_segments, dtype=torch.int64).to(
        device, non_blocking=True).expand(batch),
            torch.as_tensor(act, dtype=torch.bool).to(device, non_blocking=True).expand(batch))


@torch.inference_mode()
def run_segments(model: nn.Module, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor,
                 max_segments: torch.Tensor | int, act: torch.Tensor | bool,
                 stop_early: bool = True, stop_check_lag: int | None = None,
                 step: Callable[[Any, torch.Tensor, torch.Tensor], tuple[Any, Any]] | None = None
                 ) -> SegmentRun:
    """Runs up to max(max_segments) segments of `model` (an HRM or TRM, used as it is: call
    `.eval()` first) on a batch, under bf16 autocast on CUDA as in training.

    No segment waits for the host: "paper" rows all run their max_segments, so a batch without
    "act" rows runs max(max_segments) segments with no synchronisation until the caller reads
    the outputs; with "act" rows the early stop is checked `stop_check_lag` segments late
    (None: `STOP_CHECK_LAG_CUDA` on CUDA when each segment launches its kernels one by one, 0
    with a `step` (CUDA graphs: one launch a segment, so waiting before the next launch leaves the
    GPU idle for microseconds) and on the CPU, where reading a flag costs nothing), so a run may
    hold that many segments past the last stop. Outputs are inference tensors.

    Args:
        inputs: int [B, L] token ids on the model's device.
        puzzle_identifiers: int [B].
        max_segments: int [B] (or one int for all), each >= 1: the most segments per example.
            On the CPU (or an int) its bounds are read without touching the device.
        act: bool [B] (or one bool): "act" mode for that example, else "paper"; on the CPU (or
            a bool) it is read without touching the device.
        stop_early: stop once every example has stopped; False runs all max(max_segments)
            segments (evaluation's per-segment curve).
        step: what runs one segment, `(carry, inputs, puzzle_identifiers) -> (carry, output)`;
            None calls `model` under autocast (on CUDA the solver passes `GraphedSegments`).
    Raises:
        ValueError: an empty batch or a max_segments below 1.
    """
    batch, device = inputs.shape[0], inputs.device
    most = _check_batch(batch, max_segments)
    tracking = _any_act(act)  # "paper" rows stop at their max_segments: nothing to watch
    stop_early = stop_early and tracking
    max_segments, act = _per_example(max_segments, act, device, batch)
    if stop_check_lag is None:  # kernels launched one by one on CUDA: check late
        stop_check_lag = STOP_CHECK_LAG_CUDA if device.type == "cuda" and step is None else 0
    flags = _StopFlags(device, stop_check_lag)
    carry = model.initial_carry(batch)
    predictions, q_halts, halts = [], [], []
    stopped = torch.zeros(batch, dtype=torch.bool, device=device)
    used = max_segments.clone()
    for segment in range(1, most + 1):
        with autocast(device):
            carry, output = (step or model)(carry, inputs, puzzle_identifiers)
        halt = halting_decision(output)
        predictions.append(output.logits.argmax(-1))
        q_halts.append(output.q_halt_logits.float())
        halts.append(halt)
        if not tracking:
            continue
        halting = ~stopped & act & halt
        used = torch.where(halting, segment, used)
        stopped |= halting | (max_segments <= segment)
        if stop_early:
            flags.push(stopped)
            if flags.all_stopped():
                break
    return SegmentRun(predictions=torch.stack(predictions), q_halt_logits=torch.stack(q_halts),
                      halts=torch.stack(halts), segments_used=used)
