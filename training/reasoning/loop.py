"""The HRM / TRM trainer: deep supervision with ACT on an endless stream of generated puzzles.

References (read, not copied): sapientinc/HRM `pretrain.py` and TinyRecursiveModels `pretrain.py`
(one optimizer step per segment on a persistent batch carry, AdamATan2 for the network and
sign-SGD for the puzzle embeddings, linear warm-up to a constant learning rate, EMA of the
weights for evaluation and checkpoints in TRM), with the ACT logic in `act.py`.
The command-level trainer (`trainer.train_reasoning`, one `ReasoningConfig`) builds the model
and the task and calls `train` here.

Per step: halted slots of the batch carry are refilled from `PuzzleStream` (fresh generated
puzzles, freshly augmented; generated ahead in `data_workers` worker processes, so the step only
waits for them when they fall behind), one segment runs with gradients, the loss is
backpropagated, the dense gradients clipped by global norm, AdamATan2 and sign-SGD step, and the
EMA is updated.
Metrics per step go to `metrics.jsonl` in the output directory (one JSON object a line, "kind"
"train" or "eval"); held-out evaluations use the EMA copy; checkpoints (safetensors + JSON via
`services.neural.checkpoint`) hold the EMA weights. CUDA runs under bf16 autocast, with the
examples pinned and copied asynchronously; CPU in float32. A step's metrics reach the host in one
transfer (one synchronisation with the GPU besides the halted count).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from services.neural.checkpoint import replace_checkpoint
from services.neural.models.reasoning_layers import count_parameters
from training.reasoning.act import (
    ACTCarry,
    ACTLoss,
    act_loss,
    initial_carry,
    replace_halted,
    run_segment,
)
from training.reasoning.data import (
    MazeTask,
    PuzzleBatch,
    PuzzleStream,
    SudokuTask,
    held_out_set,
)
from training.reasoning.ema import WeightEMA
from training.reasoning.evaluation import Evaluation, evaluate
from training.reasoning.optim import (
    AdamATan2,
    SparseSignSGD,
    set_learning_rate,
    warmup_constant,
)

METRICS_FILE = "metrics.jsonl"
CHECKPOINT_DIR = "checkpoint"


@dataclass(frozen=True)
class TrainingSettings:
    """Everything a run needs besides the model and the task.

    steps: optimizer steps (one per segment); time_limit_s: stop earlier after this many seconds
    of training (evaluation time excluded; None: no limit). lr / puzzle_emb_lr: after warm-up;
    weight decays are decoupled. ema_rate: None disables the EMA (HRM's reference has none);
    ema_warmup: cap the EMA decay at (1 + t) / (10 + t) (`ema.WeightEMA`).
    halt_max_steps / halt_exploration_prob: None takes the model config's. eval_segments: None
    takes halt_max_steps. eval_every: steps between held-out evaluations (0: only at the end).
    data_workers: processes generating training puzzles ahead of the steps (0: generated inside
    the step, in this process); the examples are the same for any number (`PuzzleStream`).
    """

    steps: int = 1000
    batch_size: int = 64
    seed: int = 0
    lr: float = 1e-3
    puzzle_emb_lr: float = 1e-3
    weight_decay: float = 0.1
    puzzle_emb_weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 100
    grad_clip: float = 1.0
    ema_rate: float | None = 0.999
    ema_warmup: bool = True
    halt_max_steps: int | None = None
    halt_exploration_prob: float | None = None
    eval_every: int = 500
    eval_puzzles: int = 1000
    eval_segments: int | None = None
    eval_batch_size: int = 256
    time_limit_s: float | None = None
    device: str = "cpu"
    data_workers: int = 0
    progress: bool = True


@dataclass(frozen=True)
class TrainingResult:
    """A finished run: steps done, seconds of training, the last step's metrics, and the final
    held-out evaluations (EMA weights) in both modes."""

    steps: int
    train_seconds: float
    last_metrics: dict[str, float]
    paper: Evaluation
    act: Evaluation
    checkpoint: Path | None
    metrics_file: Path | None
    evaluated_model: nn.Module


def _split_parameters(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(dense parameters, puzzle-embedding tables)."""
    sparse, dense = [], []
    for name, parameter in model.named_parameters():
        (sparse if name.split(".")[-2:-1] == ["puzzle_emb"] else dense).append(parameter)
    return dense, sparse


_STEP_METRICS = ("loss", "token_loss", "q_halt_loss", "q_continue_loss", "grad_norm",
                 "batch_cell_accuracy", "batch_exact_accuracy", "halted", "cell_accuracy",
                 "exact_accuracy", "mean_segments")
_HALTED_ONLY = ("cell_accuracy", "exact_accuracy", "mean_segments")


def _step_metrics(halted: torch.Tensor, steps: torch.Tensor, loss: ACTLoss,
                  grad_norm: torch.Tensor) -> dict[str, float]:
    """Losses, the gradient norm, and the metrics of the examples that halted this step (as the
    references report; left out when none halted), computed on the device and brought to the
    host in one transfer."""
    weight = halted.double()
    count = weight.sum()
    share = weight / count.clamp_min(1)
    values = torch.stack([
        loss.total.detach().double(), loss.token.double(), loss.q_halt.double(),
        loss.q_continue.double(), grad_norm.detach().double(),
        loss.cell_correct.double().mean(), loss.sequence_correct.double().mean(), count,
        (loss.cell_correct.double().mean(-1) * share).sum(),
        (loss.sequence_correct.double() * share).sum(), (steps.double() * share).sum(),
    ]).tolist()
    metrics = dict(zip(_STEP_METRICS, values, strict=True))
    metrics["halted"] = int(metrics["halted"])
    if not metrics["halted"]:
        for name in _HALTED_ONLY:
            del metrics[name]
    return metrics


class _MetricsLog:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")

    def write(self, record: dict[str, Any]) -> None:
        if self.path is not None:
            with self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")


def train(model: nn.Module, architecture: str, task: SudokuTask | MazeTask,
          settings: TrainingSettings, output_dir: Path | str | None = None,
          metadata: dict[str, Any] | None = None,
          held_out: PuzzleBatch | None = None) -> TrainingResult:
    """Trains `model` (HRM or TRM, vocabulary and sequence length matching `task`) in place.

    Args:
        model: a freshly built or partly trained HRM / TRM.
        architecture: "hrm" or "trm" (written into the checkpoint).
        task: what the stream generates.
        settings: the run's settings.
        output_dir: metrics.jsonl and checkpoint/ go here; None writes nothing.
        metadata: extra JSON facts for the checkpoint (preset name, ...).
        held_out: evaluation set; None generates `settings.eval_puzzles` with a seed derived
            from `settings.seed`, excluded from the training stream.
    Returns:
        `TrainingResult`; the final evaluations use the EMA weights when the EMA is on.
    Raises:
        ValueError: model and task disagree on vocabulary or length, or bad settings.
    """
    config = model.config
    if config.vocab_size != task.vocab_size or config.seq_len != task.seq_len:
        raise ValueError(f"model (vocab {config.vocab_size}, length {config.seq_len}) does not "
                         f"fit the task (vocab {task.vocab_size}, length {task.seq_len})")
    if settings.batch_size < 1 or settings.steps < 0:
        raise ValueError(f"invalid batch_size {settings.batch_size} or steps {settings.steps}")
    if settings.data_workers < 0:
        raise ValueError(f"invalid data_workers {settings.data_workers}")
    device = torch.device(settings.device)
    model.to(device).train()
    output = Path(output_dir) if output_dir is not None else None
    if held_out is None:
        held_out = held_out_set(task, settings.eval_puzzles, settings.seed + 1)
    stream = PuzzleStream(task, settings.seed, exclude=held_out, workers=settings.data_workers,
                          pin_memory=device.type == "cuda")
    try:
        run = _Run(model, architecture, task, settings, device, output, held_out, stream,
                   metadata)
        return _train_loop(run)
    finally:
        stream.close()


class _Optimizers:
    """AdamATan2 on the dense parameters, sign-SGD on the puzzle embeddings (when the model has
    them), and the EMA of the weights (when on)."""

    def __init__(self, model: nn.Module, settings: TrainingSettings) -> None:
        self.settings = settings
        self.dense, sparse = _split_parameters(model)
        self.dense_optimizer = AdamATan2(self.dense, lr=settings.lr, betas=settings.betas,
                                         weight_decay=settings.weight_decay)
        self.sparse_optimizer = (SparseSignSGD(sparse, lr=settings.puzzle_emb_lr,
                                               weight_decay=settings.puzzle_emb_weight_decay)
                                 if sparse else None)
        self.ema = (WeightEMA(model, settings.ema_rate, settings.ema_warmup)
                    if settings.ema_rate is not None else None)

    def set_learning_rates(self, step: int) -> float:
        """The warm-up schedule at `step` on both optimizers; returns the dense learning rate."""
        settings = self.settings
        lr = warmup_constant(step, settings.lr, settings.warmup_steps)
        set_learning_rate(self.dense_optimizer, lr)
        if self.sparse_optimizer is not None:
            set_learning_rate(self.sparse_optimizer,
                              warmup_constant(step, settings.puzzle_emb_lr,
                                              settings.warmup_steps))
        return lr

    def step(self, model: nn.Module, loss: torch.Tensor) -> torch.Tensor:
        """Backpropagates `loss`, clips the dense gradients by global norm, steps both
        optimizers and the EMA; returns the gradient norm before clipping."""
        self.dense_optimizer.zero_grad(set_to_none=True)
        if self.sparse_optimizer is not None:
            self.sparse_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.dense, self.settings.grad_clip)
        self.dense_optimizer.step()
        if self.sparse_optimizer is not None:
            self.sparse_optimizer.step()
        if self.ema is not None:
            self.ema.update(model)
        return grad_norm


class _Run:
    """One training run's parts: the model and its optimizers, the data, the metrics log and
    the checkpoint it writes."""

    def __init__(self, model: nn.Module, architecture: str, task: SudokuTask | MazeTask,
                 settings: TrainingSettings, device: torch.device, output: Path | None,
                 held_out: PuzzleBatch, stream: PuzzleStream,
                 metadata: dict[str, Any] | None) -> None:
        config = model.config
        self.model, self.architecture, self.task, self.settings = (model, architecture, task,
                                                                   settings)
        self.device, self.output, self.held_out, self.stream = device, output, held_out, stream
        self.halt_max_steps = settings.halt_max_steps or config.halt_max_steps
        self.exploration = (config.halt_exploration_prob
                            if settings.halt_exploration_prob is None
                            else settings.halt_exploration_prob)
        self.eval_segments = settings.eval_segments or self.halt_max_steps
        self.log = _MetricsLog(output / METRICS_FILE if output is not None else None)
        self.generator = torch.Generator(device=device).manual_seed(settings.seed)
        self.optimizers = _Optimizers(model, settings)
        self.metadata = {**(metadata or {}), "architecture": architecture,
                         "task": asdict(task), "task_kind": type(task).__name__,
                         "settings": {k: v for k, v in asdict(settings).items()
                                      if k != "progress"},
                         "parameters": count_parameters(model),
                         "ema": self.optimizers.ema is not None}

    def evaluation_model(self) -> nn.Module:
        """The EMA average when the EMA is on, else the model itself."""
        ema = self.optimizers.ema
        return ema.averaged_copy(self.model) if ema is not None else self.model

    def checkpoint(self, evaluated: nn.Module, step: int, results: dict[str, Any]
                   ) -> Path | None:
        """Replaces `output/checkpoint` with `evaluated` (nothing without an output)."""
        if self.output is None:
            return None
        directory = self.output / CHECKPOINT_DIR
        replace_checkpoint(directory, evaluated, self.architecture,
                           {**self.metadata, "step": step, "metrics": results})
        return directory

    def initial_carry(self) -> ACTCarry:
        """Every row starts halted, so the first segment replaces the whole batch with real
        puzzles; this batch only gives the carry its shapes."""
        size, length = self.settings.batch_size, self.task.seq_len
        empty = PuzzleBatch(torch.zeros(size, length, dtype=torch.int32),
                            torch.zeros(size, length, dtype=torch.int64),
                            torch.zeros(size, dtype=torch.int32)).to(self.device)
        return initial_carry(self.model, empty)

    def train_step(self, carry: ACTCarry, step: int
                   ) -> tuple[ACTCarry, dict[str, float], float, float]:
        """One optimizer step: refill the halted slots, one segment, the loss, the update.
        Returns the carry, the step's metrics, the learning rate and the seconds spent waiting
        for data."""
        waited = self.stream.wait_seconds
        fresh = self.stream.take(int(carry.halted.sum())).to(self.device, non_blocking=True)
        data_seconds = self.stream.wait_seconds - waited
        carry = replace_halted(self.model, carry, fresh)
        lr = self.optimizers.set_learning_rates(step)
        carry, result = run_segment(self.model, carry, self.halt_max_steps, self.exploration,
                                    self.generator)
        loss = act_loss(result, carry.batch.labels)
        grad_norm = self.optimizers.step(self.model, loss.total)
        metrics = _step_metrics(carry.halted, carry.steps, loss, grad_norm)  # waits for the device
        return carry, metrics, lr, data_seconds

    def evaluate_midway(self, step: int, train_seconds: float, bar: tqdm) -> None:
        """A held-out evaluation ("paper" mode, EMA weights) logged and checkpointed."""
        evaluated = self.evaluation_model()
        result = evaluate(evaluated, self.held_out, self.eval_segments, "paper",
                          self.settings.eval_batch_size)
        self.log.write({"kind": "eval", "step": step, "train_seconds": train_seconds,
                        **result.as_dict()})
        bar.write(f"step {step}: held-out exact {result.exact_accuracy:.3f} "
                  f"cell {result.cell_accuracy:.3f}")
        self.checkpoint(evaluated, step, {"paper": result.as_dict()})

    def finish(self, step: int, train_seconds: float, last: dict[str, float],
               train_cpu_seconds: float = 0.0) -> TrainingResult:
        """The final held-out evaluations in both modes, logged, and the final checkpoint (its
        metrics with the training's wall and CPU seconds, evaluations excluded)."""
        evaluated = self.evaluation_model()
        segments, batch_size = self.eval_segments, self.settings.eval_batch_size
        paper = evaluate(evaluated, self.held_out, segments, "paper", batch_size)
        act = evaluate(evaluated, self.held_out, segments, "act", batch_size)
        for final in (paper, act):
            self.log.write({"kind": "eval", "step": step, "train_seconds": train_seconds,
                            "final": True, **final.as_dict()})
        directory = self.checkpoint(evaluated, step, {
            "paper": paper.as_dict(), "act": act.as_dict(), "train_seconds": train_seconds,
            "train_cpu_seconds": train_cpu_seconds, "puzzles_generated": self.stream.generated})
        return TrainingResult(steps=step, train_seconds=train_seconds, last_metrics=last,
                              paper=paper, act=act, checkpoint=directory,
                              metrics_file=self.log.path, evaluated_model=evaluated)


def _train_loop(run: _Run) -> TrainingResult:
    settings = run.settings
    carry = run.initial_carry()
    train_seconds = 0.0
    train_cpu_seconds = 0.0  # this process's CPU (all its threads; data workers excluded)
    last: dict[str, float] = {}
    step = 0
    bar = tqdm(total=settings.steps, desc=f"train {run.architecture}", unit="step",
               disable=not settings.progress)
    try:
        while step < settings.steps:
            if settings.time_limit_s is not None and train_seconds >= settings.time_limit_s:
                break
            started, cpu_started = time.perf_counter(), time.process_time()
            carry, last, lr, data_seconds = run.train_step(carry, step)
            step += 1
            elapsed = time.perf_counter() - started
            train_seconds += elapsed
            train_cpu_seconds += time.process_time() - cpu_started
            last.update(lr=lr, step_time_s=elapsed, data_wait_s=data_seconds)
            if not math.isfinite(last["loss"]):
                raise FloatingPointError(f"loss became {last['loss']} at step {step}")
            run.log.write({"kind": "train", "step": step, "train_seconds": train_seconds,
                           "train_cpu_seconds": train_cpu_seconds, **last})
            bar.update(1)
            bar.set_postfix(loss=f"{last['loss']:.3f}",
                            exact=f"{last.get('exact_accuracy', 0):.2f}")
            if settings.eval_every and step % settings.eval_every == 0 and step < settings.steps:
                run.evaluate_midway(step, train_seconds, bar)
    except KeyboardInterrupt:
        # Ctrl-C: the weights so far (EMA when on) become the checkpoint, written atomically,
        # so the interrupted run leaves a loadable one; then the interrupt goes on.
        bar.close()
        run.checkpoint(run.evaluation_model(), step, {"interrupted": True,
                                                      "train_seconds": train_seconds})
        raise
    bar.close()
    return run.finish(step, train_seconds, last, train_cpu_seconds)
