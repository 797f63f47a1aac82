"""The HRM / TRM trainer: deep supervision with ACT on an endless stream of generated puzzles.

References (read, not copied): sapientinc/HRM `pretrain.py` and TinyRecursiveModels `pretrain.py`
(one optimizer step per segment on a persistent batch carry, AdamATan2 for the network and
sign-SGD for the puzzle embeddings, linear warm-up to a constant learning rate, EMA of the
weights for evaluation and checkpoints in TRM), with the ACT logic in `act.py`.

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from libs.puzzles import maze as maze_lib
from services.neural.checkpoint import load_checkpoint, replace_checkpoint
from services.neural.models import ARCHITECTURES as MODEL_ARCHITECTURES
from services.neural.models.presets import get_preset
from services.neural.models.reasoning_layers import count_parameters
from training.reasoning.act import (
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
ARCHITECTURES = ("hrm", "trm")


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
        return _train_loop(model, architecture, task, settings, device, output, held_out,
                           stream, metadata)
    finally:
        stream.close()


def _train_loop(model: nn.Module, architecture: str, task: SudokuTask | MazeTask,
                settings: TrainingSettings, device: torch.device, output: Path | None,
                held_out: PuzzleBatch, stream: PuzzleStream,
                metadata: dict[str, Any] | None) -> TrainingResult:
    config = model.config
    halt_max_steps = settings.halt_max_steps or config.halt_max_steps
    exploration = (config.halt_exploration_prob if settings.halt_exploration_prob is None
                   else settings.halt_exploration_prob)
    eval_segments = settings.eval_segments or halt_max_steps
    log = _MetricsLog(output / METRICS_FILE if output is not None else None)
    generator = torch.Generator(device=device).manual_seed(settings.seed)

    dense, sparse = _split_parameters(model)
    optimizer = AdamATan2(dense, lr=settings.lr, betas=settings.betas,
                          weight_decay=settings.weight_decay)
    sparse_optimizer = (SparseSignSGD(sparse, lr=settings.puzzle_emb_lr,
                                      weight_decay=settings.puzzle_emb_weight_decay)
                        if sparse else None)
    ema = (WeightEMA(model, settings.ema_rate, settings.ema_warmup)
           if settings.ema_rate is not None else None)

    def evaluation_model() -> nn.Module:
        return ema.averaged_copy(model) if ema is not None else model

    run_metadata = {**(metadata or {}), "architecture": architecture, "task": asdict(task),
                    "task_kind": type(task).__name__,
                    "settings": {k: v for k, v in asdict(settings).items() if k != "progress"},
                    "parameters": count_parameters(model), "ema": ema is not None}

    def checkpoint(evaluated: nn.Module, step: int, results: dict[str, Any]) -> Path | None:
        if output is None:
            return None
        directory = output / CHECKPOINT_DIR
        replace_checkpoint(directory, evaluated, architecture,
                           {**run_metadata, "step": step, "metrics": results})
        return directory

    # Every row starts halted, so the first segment replaces the whole batch with real puzzles;
    # this batch only gives the carry its shapes.
    empty = PuzzleBatch(torch.zeros(settings.batch_size, task.seq_len, dtype=torch.int32),
                        torch.zeros(settings.batch_size, task.seq_len, dtype=torch.int64),
                        torch.zeros(settings.batch_size, dtype=torch.int32)).to(device)
    carry = initial_carry(model, empty)
    train_seconds = 0.0
    last: dict[str, float] = {}
    step = 0
    bar = tqdm(total=settings.steps, desc=f"train {architecture}", unit="step",
               disable=not settings.progress)
    try:
        while step < settings.steps:
            if settings.time_limit_s is not None and train_seconds >= settings.time_limit_s:
                break
            started = time.perf_counter()
            waited = stream.wait_seconds
            fresh = stream.take(int(carry.halted.sum())).to(device, non_blocking=True)
            data_seconds = stream.wait_seconds - waited
            carry = replace_halted(model, carry, fresh)
            lr = warmup_constant(step, settings.lr, settings.warmup_steps)
            set_learning_rate(optimizer, lr)
            if sparse_optimizer is not None:
                set_learning_rate(sparse_optimizer,
                                  warmup_constant(step, settings.puzzle_emb_lr,
                                                  settings.warmup_steps))
            carry, result = run_segment(model, carry, halt_max_steps, exploration, generator)
            loss = act_loss(result, carry.batch.labels)
            optimizer.zero_grad(set_to_none=True)
            if sparse_optimizer is not None:
                sparse_optimizer.zero_grad(set_to_none=True)
            loss.total.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(dense, settings.grad_clip)
            optimizer.step()
            if sparse_optimizer is not None:
                sparse_optimizer.step()
            if ema is not None:
                ema.update(model)
            step += 1
            last = _step_metrics(carry.halted, carry.steps, loss, grad_norm)  # waits for the device
            elapsed = time.perf_counter() - started
            train_seconds += elapsed
            last.update(lr=lr, step_time_s=elapsed, data_wait_s=data_seconds)
            if not math.isfinite(last["loss"]):
                raise FloatingPointError(f"loss became {last['loss']} at step {step}")
            log.write({"kind": "train", "step": step, "train_seconds": train_seconds, **last})
            bar.update(1)
            bar.set_postfix(loss=f"{last['loss']:.3f}",
                            exact=f"{last.get('exact_accuracy', 0):.2f}")
            if settings.eval_every and step % settings.eval_every == 0 and step < settings.steps:
                evaluated = evaluation_model()
                result_eval = evaluate(evaluated, held_out, eval_segments, "paper",
                                       settings.eval_batch_size)
                record = {"kind": "eval", "step": step, "train_seconds": train_seconds,
                          **result_eval.as_dict()}
                log.write(record)
                bar.write(f"step {step}: held-out exact {result_eval.exact_accuracy:.3f} "
                          f"cell {result_eval.cell_accuracy:.3f}")
                checkpoint(evaluated, step, {"paper": result_eval.as_dict()})
    except KeyboardInterrupt:
        # Ctrl-C: the weights so far (EMA when on) become the checkpoint, written atomically,
        # so the interrupted run leaves a loadable one; then the interrupt goes on.
        bar.close()
        checkpoint(evaluation_model(), step, {"interrupted": True,
                                              "train_seconds": train_seconds})
        raise
    bar.close()

    evaluated = evaluation_model()
    paper = evaluate(evaluated, held_out, eval_segments, "paper", settings.eval_batch_size)
    act = evaluate(evaluated, held_out, eval_segments, "act", settings.eval_batch_size)
    for final in (paper, act):
        log.write({"kind": "eval", "step": step, "train_seconds": train_seconds, "final": True,
                   **final.as_dict()})
    directory = checkpoint(evaluated, step, {"paper": paper.as_dict(), "act": act.as_dict(),
                                             "train_seconds": train_seconds,
                                             "puzzles_generated": stream.generated})
    return TrainingResult(steps=step, train_seconds=train_seconds, last_metrics=last,
                          paper=paper, act=act, checkpoint=directory,
                          metrics_file=log.path, evaluated_model=evaluated)


TASK_KINDS = ("sudoku", "maze")


def task_for_preset(preset: str, kind: str | None = None, blanks: int = 16
                    ) -> SudokuTask | MazeTask:
    """The generated task that preset `preset` is shaped for.

    `kind` None infers it: a vocabulary of 6 ids (padding and the five maze characters) over an
    odd square grid is a maze, anything else a Sudoku. A Sudoku task is N x N (N = the square root
    of the sequence length) with `blanks` blanks; a maze task is `MazeTask` on a
    ((side - 1) / 2)^2 lattice (9x9 grid: 4x4 cells) with its default openings and minimum path.

    Raises:
        ValueError: `kind` not "sudoku"/"maze", or the preset's vocabulary or length do not fit.
        services.neural.models.presets.UnknownPreset: unknown preset.
    """
    config = get_preset(preset).config
    side = math.isqrt(config.seq_len)
    square = side * side == config.seq_len
    if kind is None:
        kind = "maze" if (config.vocab_size == MazeTask().vocab_size and square
                          and side % 2 == 1) else "sudoku"
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task {kind!r}; expected one of {TASK_KINDS}")
    task: SudokuTask | MazeTask
    if kind == "maze":
        if not square or side % 2 == 0 or side < 3:
            raise ValueError(f"preset {preset!r} (length {config.seq_len}) is not an odd square "
                             f"maze grid")
        task = MazeTask(rows=(side - 1) // 2, cols=(side - 1) // 2)
    else:
        task = SudokuTask(size=side, blanks=blanks)
        if not square:
            raise ValueError(f"preset {preset!r} is not a Sudoku model")
    if config.vocab_size != task.vocab_size or config.seq_len != task.seq_len:
        raise ValueError(f"preset {preset!r} (vocab {config.vocab_size}, length "
                         f"{config.seq_len}) is not a {kind} model")
    return task


def exact_by_path_length(model: nn.Module, held_out: PuzzleBatch, segments: int,
                         batch_size: int = 256) -> dict[int, dict[str, float]]:
    """Maze held-out exact accuracy ("paper" mode) grouped by shortest-path length.

    The length of an example is its label's path cells + 1 (steps from S to G).
    Returns: {length: {"puzzles": n, "exact_accuracy": fraction}}, lengths ascending.
    """
    lengths = (held_out.labels == maze_lib.PATH).sum(-1) + 1
    groups: dict[int, dict[str, float]] = {}
    for length in sorted(set(lengths.tolist())):
        index = torch.nonzero(lengths == length).flatten()
        subset = PuzzleBatch(held_out.inputs[index], held_out.labels[index],
                             held_out.puzzle_identifiers[index])
        result = evaluate(model, subset, segments, "paper", batch_size)
        groups[int(length)] = {"puzzles": len(subset), "exact_accuracy": result.exact_accuracy}
    return groups


def train_reasoning(model: str, preset: str, output_dir: Path | str, steps: int = 20000,
                    batch_size: int = 64, blanks: int = 16, seed: int = 0,
                    eval_every: int = 500, eval_puzzles: int = 1000,
                    time_limit_s: float | None = None, *, lr: float = 1e-3,
                    warmup_steps: int = 100, weight_decay: float = 0.1,
                    ema_rate: float | None = None, eval_segments: int | None = None,
                    device: str = "cpu", progress: bool = True,
                    task: str | None = None, data_workers: int = 0,
                    init_from: Path | str | None = None) -> dict[str, Any]:
    """Trains preset `preset` of architecture `model` ("trm" or "hrm") on generated puzzles; the
    CLI's `mcts-mesh train trm|hrm --preset ... [--task sudoku|maze]`.

    The task comes from `task_for_preset(preset, task, blanks)`: Sudoku N x N with `blanks`
    blanks, or mazes (`MazeTask`) for a maze preset such as "trm-mlp-cpu-maze9". The held-out set
    is `held_out_set(task, eval_puzzles, seed + 1)` (`mcts-mesh puzzles heldout` writes it).
    `ema_rate` None means 0.999 for TRM and no EMA for HRM (as the references). `data_workers`
    processes generate the training puzzles ahead of the steps (`TrainingSettings`). Writes
    `output_dir/metrics.jsonl` and the checkpoint `output_dir/checkpoint/`. Returns a JSON-ready
    summary: steps, train_seconds, checkpoint, metrics_file, parameters, task, and the final
    held-out evaluations ("paper" and "act", each with exact_by_segment and segment_gain); for
    mazes also "paper_exact_by_path_length" (`exact_by_path_length`).

    `init_from` continues from the weights of a checkpoint directory of the same preset (the
    weights it holds: the EMA average for TRM); the optimizer, its warm-up and the EMA start
    afresh, and the checkpoint's metadata records where it started.

    Raises:
        ValueError: `model` not "trm"/"hrm", or it is not the preset's architecture, or the
            preset does not fit the task, or `init_from` holds another architecture or config.
        services.neural.checkpoint.CheckpointError: `init_from` cannot be loaded.
        services.neural.models.presets.UnknownPreset: unknown preset.
    """
    if model not in ARCHITECTURES:
        raise ValueError(f"unknown model {model!r}; expected one of {ARCHITECTURES}")
    chosen = get_preset(preset)
    if chosen.architecture != model:
        raise ValueError(f"preset {preset!r} is a {chosen.architecture} preset, not {model}")
    generated = task_for_preset(preset, task, blanks)
    if ema_rate is None:
        ema_rate = 0.999 if model == "trm" else None
    settings = replace(TrainingSettings(), steps=steps, batch_size=batch_size, seed=seed,
                       lr=lr, puzzle_emb_lr=lr, warmup_steps=warmup_steps,
                       weight_decay=weight_decay, ema_rate=ema_rate, eval_every=eval_every,
                       eval_puzzles=eval_puzzles, eval_segments=eval_segments,
                       time_limit_s=time_limit_s, device=device, progress=progress,
                       data_workers=data_workers)
    torch.manual_seed(seed)
    network = MODEL_ARCHITECTURES[model].model_type(chosen.config)
    metadata: dict[str, Any] = {"preset": preset}
    if init_from is not None:
        start = load_checkpoint(init_from)
        expected = json.loads(json.dumps(asdict(chosen.config)))
        if start.architecture != model or start.config != expected:
            raise ValueError(f"{init_from} holds a {start.architecture} checkpoint of another "
                             f"config than preset {preset!r}")
        network.load_state_dict(start.model.state_dict())
        metadata.update(init_from=str(init_from), init_step=start.metadata.get("step"),
                        init_version=start.version)
    held_out = held_out_set(generated, eval_puzzles, seed + 1)
    result = train(network, model, generated, settings, output_dir, metadata=metadata,
                   held_out=held_out)
    summary = {"model": model, "preset": preset, "task": asdict(generated),
               "task_kind": type(generated).__name__, "steps": result.steps,
               "train_seconds": result.train_seconds, "parameters": count_parameters(network),
               "checkpoint": str(result.checkpoint), "metrics_file": str(result.metrics_file),
               "last_metrics": result.last_metrics, "paper": result.paper.as_dict(),
               "act": result.act.as_dict()}
    if isinstance(generated, MazeTask):
        summary["paper_exact_by_path_length"] = exact_by_path_length(
            result.evaluated_model, held_out, result.paper.segments, settings.eval_batch_size)
    return summary
