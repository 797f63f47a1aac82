"""Deep supervision with adaptive computation time (ACT) for HRM and TRM: the persistent batch
carry, one supervised segment, and the losses.

References (read, not copied): HRM paper section 2 ("Deep supervision", "Adaptive computational
time") and sapientinc/HRM `models/hrm/hrm_act_v1.py` (the ACT wrapper) and `models/losses.py`
(`ACTLossHead`); TRM paper section 4.6 ("Simpler ACT") and TinyRecursiveModels
`models/recursive_reasoning/trm.py` and `models/losses.py`.

The batch carry holds B slots. Each training step runs ONE segment on every slot. A slot whose
example halted at the previous step first receives a fresh example and the model's initial state
(its segment counter reset to 0); the other slots continue from their detached state. So every
optimizer step sees a mix of examples at different segments, and an example gets at most
`halt_max_steps` segments of supervision.

Halting while training (no halting at evaluation, which chooses its own segments):
- every example halts at `halt_max_steps`;
- HRM halts when Q(halt) > Q(continue); TRM when its single halting logit is > 0;
- exploration: with probability `halt_exploration_prob` an example gets a minimum number of
  segments drawn uniformly from 2..halt_max_steps and cannot halt before it.
Losses: stablemax cross-entropy over the output tokens (mean over a sequence's valid tokens, then
mean over the batch) + 0.5 * (halting loss + continue loss):
- TRM and HRM: Q(halt) is trained by binary cross-entropy towards "the whole sequence is right";
- HRM only: Q(continue) by binary cross-entropy towards the bootstrapped target
  sigmoid(Q_next(halt)) at the last segment, else sigmoid(max(Q_next(halt), Q_next(continue))),
  from an extra forward pass of the next segment without gradients (Q-learning).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from services.neural.models.precision import autocast
from services.neural.models.reasoning_layers import IGNORE_LABEL_ID, stablemax_cross_entropy
from training.reasoning.data import PuzzleBatch

Q_LOSS_WEIGHT = 0.5
"""Weight of the halting and continue losses against the token loss (both references)."""


@dataclass(frozen=True)
class ACTCarry:
    """The persistent batch state between training steps.

    model_carry: the model's recurrent state (`HRMCarry` or `TRMCarry`), [B, P + L, D] tensors.
    steps: int32 [B], segments each slot's current example has run.
    halted: bool [B], slots whose example is finished; refilled before the next segment.
    batch: the current examples of the B slots.
    """

    model_carry: object
    steps: torch.Tensor
    halted: torch.Tensor
    batch: PuzzleBatch


@dataclass(frozen=True)
class SegmentResult:
    """What one training segment produced, for the loss.

    logits: float [B, L, V]; q_halt_logits: float32 [B]; q_continue_logits: float32 [B] (HRM) or
    None (TRM); target_q_continue: float32 [B] in (0, 1), the Q-learning target (HRM), or None.
    """

    logits: torch.Tensor
    q_halt_logits: torch.Tensor
    q_continue_logits: torch.Tensor | None
    target_q_continue: torch.Tensor | None


def initial_carry(model: nn.Module, batch: PuzzleBatch) -> ACTCarry:
    """A carry whose B = len(batch) slots are all halted, so the first step fills every slot."""
    size = len(batch)
    device = batch.inputs.device
    return ACTCarry(model_carry=model.initial_carry(size),
                    steps=torch.zeros(size, dtype=torch.int32, device=device),
                    halted=torch.ones(size, dtype=torch.bool, device=device), batch=batch)


def replace_halted(model: nn.Module, carry: ACTCarry, fresh: PuzzleBatch) -> ACTCarry:
    """Puts `fresh` examples (one per halted slot, in slot order) into the halted slots, resets
    their model state to the initial one and their segment count to 0; other slots are kept.

    Raises:
        ValueError: len(fresh) differs from the number of halted slots.
    """
    halted = carry.halted
    count = int(halted.sum())
    if len(fresh) != count:
        raise ValueError(f"{count} halted slots but {len(fresh)} fresh examples")
    if count == 0:
        return carry
    fields = []
    for current, new in ((carry.batch.inputs, fresh.inputs), (carry.batch.labels, fresh.labels),
                         (carry.batch.puzzle_identifiers, fresh.puzzle_identifiers)):
        merged = current.clone()
        merged[halted] = new.to(current.device, current.dtype)
        fields.append(merged)
    return ACTCarry(model_carry=model.reset_carry(halted, carry.model_carry),
                    steps=torch.where(halted, torch.zeros_like(carry.steps), carry.steps),
                    halted=torch.zeros_like(halted), batch=PuzzleBatch(*fields))


def run_segment(model: nn.Module, carry: ACTCarry, halt_max_steps: int,
                halt_exploration_prob: float, generator: torch.Generator | None = None,
                ) -> tuple[ACTCarry, SegmentResult]:
    """One training segment on every slot of `carry` (after `replace_halted`), with gradients.

    Returns the advanced carry (steps + 1, `halted` decided as in the module docstring) and the
    outputs for the loss. For HRM it also runs the extra no-grad forward of the next segment for
    the Q(continue) target. `generator` (on the carry's device) draws the exploration.
    """
    batch = carry.batch
    device = batch.inputs.device
    with autocast(device):
        model_carry, output = model(carry.model_carry, batch.inputs, batch.puzzle_identifiers)
    q_halt = output.q_halt_logits.float()
    q_continue = getattr(output, "q_continue_logits", None)
    target = None
    with torch.no_grad():
        steps = carry.steps + 1
        is_last = steps >= halt_max_steps
        halted = is_last
        if halt_max_steps > 1:
            if q_continue is None:
                halted = halted | (q_halt > 0)
            else:
                halted = halted | (q_halt > q_continue.float())
            explore = torch.rand(steps.shape, generator=generator, device=device) \
                < halt_exploration_prob
            minimum = torch.randint(2, halt_max_steps + 1, steps.shape, generator=generator,
                                    device=device, dtype=steps.dtype)
            halted = halted & (steps >= explore * minimum)
            if q_continue is not None:
                with autocast(device):
                    _, following = model(model_carry, batch.inputs, batch.puzzle_identifiers)
                next_halt = following.q_halt_logits.float()
                next_continue = following.q_continue_logits.float()
                target = torch.sigmoid(torch.where(is_last, next_halt,
                                                   torch.maximum(next_halt, next_continue)))
    result = SegmentResult(output.logits, q_halt,
                           None if q_continue is None else q_continue.float(), target)
    return ACTCarry(model_carry, steps, halted, batch), result


@dataclass(frozen=True)
class ACTLoss:
    """The loss of one segment and its parts.

    total: scalar with gradient, token loss + 0.5 * (q_halt + q_continue).
    token, q_halt, q_continue: detached scalars (q_continue 0 for TRM).
    cell_correct: bool [B, L], argmax equals the label at a valid position.
    sequence_correct: bool [B], every valid position right.
    """

    total: torch.Tensor
    token: torch.Tensor
    q_halt: torch.Tensor
    q_continue: torch.Tensor
    cell_correct: torch.Tensor
    sequence_correct: torch.Tensor


def act_loss(result: SegmentResult, labels: torch.Tensor) -> ACTLoss:
    """Losses of a segment against labels int [B, L] (IGNORE_LABEL_ID where unsupervised).

    Token loss: per sequence, stablemax cross-entropy summed over valid positions divided by
    their count; then the batch mean. Halting: mean binary cross-entropy of q_halt towards
    sequence correctness; HRM adds that of q_continue towards its target.
    """
    valid = labels != IGNORE_LABEL_ID
    counts = valid.sum(-1)
    with torch.no_grad():
        cell_correct = valid & (result.logits.argmax(-1) == labels)
        sequence_correct = cell_correct.sum(-1) == counts
    per_position = stablemax_cross_entropy(result.logits, labels)
    token = (per_position.sum(-1) / counts.clamp_min(1)).mean()
    q_halt = F.binary_cross_entropy_with_logits(result.q_halt_logits,
                                                sequence_correct.to(result.q_halt_logits.dtype))
    q_continue = torch.zeros((), device=labels.device)
    if result.q_continue_logits is not None and result.target_q_continue is not None:
        q_continue = F.binary_cross_entropy_with_logits(result.q_continue_logits,
                                                        result.target_q_continue)
    total = token + Q_LOSS_WEIGHT * (q_halt + q_continue)
    return ACTLoss(total=total, token=token.detach(), q_halt=q_halt.detach(),
                   q_continue=q_continue.detach(), cell_correct=cell_correct,
                   sequence_correct=sequence_correct)
