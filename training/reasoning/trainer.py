"""The HRM / TRM trainer as a command (`mcts-mesh train trm|hrm --preset ...`): one frozen
`ReasoningConfig` in, a preset's network trained on its generated task (the loop is `loop.train`),
a JSON-ready summary out; the config is written whole into the checkpoint's config.json
(`training.config.CONFIG_KEY`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from libs.puzzles import maze as maze_lib
from services.neural.checkpoint import load_checkpoint
from services.neural.models import ARCHITECTURES as MODEL_ARCHITECTURES
from services.neural.models.presets import get_preset
from services.neural.models.reasoning_layers import count_parameters
from training.config import CONFIG_KEY, config_json
from training.reasoning.data import MazeTask, PuzzleBatch, SudokuTask, held_out_set
from training.reasoning.evaluation import evaluate
from training.reasoning.loop import TrainingResult, TrainingSettings, train

ARCHITECTURES = ("hrm", "trm")


@dataclass(frozen=True)
class ReasoningConfig:
    """One run of `train_reasoning`: the architecture `model` ("trm" or "hrm") and its `preset`,
    where it writes (`output_dir`), the task, and the training knobs.

    task: "sudoku", "maze" or None (inferred from the preset, `task_for_preset`); blanks: per
    generated Sudoku. ema_rate None means 0.999 for TRM and no EMA for HRM (as the references).
    time_limit_s: stop after this many seconds of training (None: no limit). data_workers:
    processes generating the training puzzles ahead of the steps (`TrainingSettings`).
    init_from: a checkpoint directory whose weights the run starts from: of the same preset, or of
    a preset that differs only in `seq_len` with weights of the same shapes (a curriculum from a
    smaller grid, e.g. `hrm-cpu-maze9` to `hrm-cpu-maze11`: attention's weights do not depend on
    the length, a TRM-MLP's do).
    """

    model: str
    preset: str
    output_dir: Path | str
    steps: int = 20000
    batch_size: int = 64
    blanks: int = 16
    seed: int = 0
    eval_every: int = 500
    eval_puzzles: int = 1000
    time_limit_s: float | None = None
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.1
    ema_rate: float | None = None
    eval_segments: int | None = None
    device: str = "cpu"
    progress: bool = True
    task: str | None = None
    data_workers: int = 0
    init_from: Path | str | None = None

    def training_settings(self) -> TrainingSettings:
        """The loop's settings (`loop.TrainingSettings`) this run trains with."""
        ema_rate = self.ema_rate
        if ema_rate is None:
            ema_rate = 0.999 if self.model == "trm" else None
        return TrainingSettings(
            steps=self.steps, batch_size=self.batch_size, seed=self.seed, lr=self.lr,
            puzzle_emb_lr=self.lr, warmup_steps=self.warmup_steps,
            weight_decay=self.weight_decay, ema_rate=ema_rate, eval_every=self.eval_every,
            eval_puzzles=self.eval_puzzles, eval_segments=self.eval_segments,
            time_limit_s=self.time_limit_s, device=self.device, progress=self.progress,
            data_workers=self.data_workers)


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


def train_reasoning(config: ReasoningConfig) -> dict[str, Any]:
    """Trains preset `config.preset` of architecture `config.model` on generated puzzles; the
    CLI's `mcts-mesh train trm|hrm --preset ... [--task sudoku|maze]`.

    The task comes from `task_for_preset(preset, task, blanks)`: Sudoku N x N with `blanks`
    blanks, or mazes (`MazeTask`) for a maze preset such as "trm-mlp-cpu-maze9". The held-out set
    is `held_out_set(task, eval_puzzles, seed + 1)` (`mcts-mesh puzzles heldout` writes it).
    Writes `output_dir/metrics.jsonl` and the checkpoint `output_dir/checkpoint/` (its metadata
    holds `config` whole under `training.config.CONFIG_KEY`). Returns a JSON-ready summary:
    steps, train_seconds, checkpoint, metrics_file, parameters, task, and the final held-out
    evaluations ("paper" and "act", each with exact_by_segment and segment_gain); for mazes also
    "paper_exact_by_path_length" (`exact_by_path_length`).

    `init_from` continues from the weights of a checkpoint directory of the same preset, or of one
    whose config differs only in `seq_len` and whose weights have this preset's shapes (a
    curriculum over grid sizes; the weights it holds: the EMA average for TRM); the optimizer,
    its warm-up and the EMA start afresh, and the checkpoint's metadata records where it started.

    Raises:
        ValueError: `model` not "trm"/"hrm", or it is not the preset's architecture, or the
            preset does not fit the task, or `init_from` holds another architecture, a config
            that differs in more than `seq_len`, or weights of other shapes.
        services.neural.checkpoint.CheckpointError: `init_from` cannot be loaded.
        services.neural.models.presets.UnknownPreset: unknown preset.
    """
    if config.model not in ARCHITECTURES:
        raise ValueError(f"unknown model {config.model!r}; expected one of {ARCHITECTURES}")
    chosen = get_preset(config.preset)
    if chosen.architecture != config.model:
        raise ValueError(f"preset {config.preset!r} is a {chosen.architecture} preset, not "
                         f"{config.model}")
    generated = task_for_preset(config.preset, config.task, config.blanks)
    settings = config.training_settings()
    torch.manual_seed(config.seed)
    network = MODEL_ARCHITECTURES[config.model].model_type(chosen.config)
    metadata: dict[str, Any] = {"preset": config.preset, CONFIG_KEY: config_json(config)}
    if config.init_from is not None:
        metadata.update(_load_initial_weights(network, config, chosen.config))
    held_out = held_out_set(generated, config.eval_puzzles, config.seed + 1)
    result = train(network, config.model, generated, settings, config.output_dir,
                   metadata=metadata, held_out=held_out)
    return _summary(config, generated, network, result, held_out, settings)


def _load_initial_weights(network: nn.Module, config: ReasoningConfig, model_config: Any
                          ) -> dict[str, Any]:
    """Loads `config.init_from`'s weights into `network`; returns what the checkpoint's metadata
    records about the start. Raises ValueError for another architecture or config."""
    start = load_checkpoint(config.init_from)
    expected = json.loads(json.dumps(asdict(model_config)))
    if start.architecture != config.model or _without_length(start.config) != _without_length(
            expected):
        raise ValueError(f"{config.init_from} holds a {start.architecture} checkpoint of another "
                         f"config than preset {config.preset!r}")
    weights = start.model.state_dict()
    shapes = {name: tuple(tensor.shape) for name, tensor in network.state_dict().items()}
    if {name: tuple(tensor.shape) for name, tensor in weights.items()} != shapes:
        raise ValueError(f"{config.init_from} holds weights of other shapes than preset "
                         f"{config.preset!r} (its seq_len {start.config.get('seq_len')}, this "
                         f"preset's {expected.get('seq_len')})")
    network.load_state_dict(weights)
    return {"init_from": str(config.init_from), "init_step": start.metadata.get("step"),
            "init_version": start.version}


def _without_length(model_config: dict[str, Any]) -> dict[str, Any]:
    """A model config without its `seq_len`, the one field a curriculum over grid sizes changes."""
    return {key: value for key, value in model_config.items() if key != "seq_len"}


def _summary(config: ReasoningConfig, generated: SudokuTask | MazeTask, network: nn.Module,
             result: TrainingResult, held_out: PuzzleBatch,
             settings: TrainingSettings) -> dict[str, Any]:
    summary = {"model": config.model, "preset": config.preset, "task": asdict(generated),
               "task_kind": type(generated).__name__, "steps": result.steps,
               "train_seconds": result.train_seconds, "parameters": count_parameters(network),
               "checkpoint": str(result.checkpoint), "metrics_file": str(result.metrics_file),
               "last_metrics": result.last_metrics, "paper": result.paper.as_dict(),
               "act": result.act.as_dict()}
    if isinstance(generated, MazeTask):
        summary["paper_exact_by_path_length"] = exact_by_path_length(
            result.evaluated_model, held_out, result.paper.segments, settings.eval_batch_size)
    return summary
