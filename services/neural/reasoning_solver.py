"""Solves grid puzzles (Sudoku, mazes) with the registry's HRM and TRM checkpoints: the core of the
`Solve` RPC, with no gRPC in it.

A request's grid is encoded with its model's task alphabet (`reasoning_task`), run through the same
segment loop as the held-out evaluation (`reasoning_segments.run_segments`, from the model's
initial carry; "paper" runs max_segments segments, "act" stops at the halting head's first halt),
and each segment's argmax prediction is decoded back to the grid alphabet. Concurrent requests to
one model share forward passes through a `DynamicBatcher` (rows with different modes and segment
budgets run in one batch; each row's answer is cut at its own stop, and rows do not interact, so a
batched answer equals the answer alone).

Every example uses puzzle identifier 0, as the trainer's generated Sudoku and mazes do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from libs.errors import FailedPrecondition, InvalidArgument, Unavailable
from services.neural.batcher import BatcherPool, DynamicBatcher
from services.neural.cuda_graphs import GraphedSegments
from services.neural.reasoning_segments import MODES, run_segments
from services.neural.registry import ModelRegistry, RegisteredModel

MAX_SEGMENTS = 64
"""Most segments one request may ask for."""


@dataclass(frozen=True)
class SegmentPrediction:
    """The decoded prediction after one segment and sigmoid(q_halt) in [0, 1]."""

    grid: str
    halt_probability: float


@dataclass(frozen=True)
class Solution:
    """A solved request.

    grid: the prediction of the last segment that counts (segment `segments_used`).
    segments: the prediction after each of the `segments_used` segments, in order.
    halt_probability: the last counted segment's sigmoid(q_halt).
    latency_ms: from the start of `ReasoningSolver.solve` to its answer, batching wait included.
    """

    model: RegisteredModel
    grid: str
    segments: list[SegmentPrediction]
    segments_used: int
    halt_probability: float
    latency_ms: float


def solve_batch(module: nn.Module, inputs: np.ndarray, max_segments: np.ndarray,
                act: np.ndarray, step: GraphedSegments | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One batch of requests through `run_segments` on the module's device.

    Args:
        module: an HRM or TRM in eval mode.
        step: the module's CUDA graphs (on a GPU), or None to run it eagerly.
        inputs: int32 [B, L] token ids.
        max_segments: int64 [B], each in 1..MAX_SEGMENTS.
        act: bool [B], "act" mode per row.
    Returns:
        predictions int64 [B, S, L] (argmax tokens after each of the S segments run),
        halt probabilities float32 [B, S], segments_used int64 [B] (entries past a row's
        segments_used are not part of its answer).
    """
    with torch.inference_mode():
        return _solve_batch(module, inputs, max_segments, act, step)


def _solve_batch(module, inputs, max_segments, act, step):
    device = next(module.parameters()).device
    tokens = torch.from_numpy(np.ascontiguousarray(inputs)).to(device)
    # max_segments and act stay on the host: run_segments reads their bounds there and moves
    # them itself, so no segment waits for the device (see run_segments).
    run = run_segments(module, tokens, torch.zeros(len(inputs), dtype=torch.int32, device=device),
                       torch.from_numpy(np.asarray(max_segments, dtype=np.int64)),
                       torch.from_numpy(np.asarray(act, dtype=np.bool_)), step=step)
    return (run.predictions.transpose(0, 1).cpu().numpy(),
            run.halt_probabilities.transpose(0, 1).cpu().numpy(),
            run.segments_used.cpu().numpy())


class ReasoningSolver:
    """Answers `solve` requests from the registry's reasoning models, batching per model.

    Args:
        registry: returns the registry currently served (raises `Unavailable` while loading).
        max_batch: most requests in one forward pass.
        max_wait_ms: how long a request waits for others to join its batch, in milliseconds.
        cuda_graphs: on a GPU, run segments by replaying CUDA graphs (`cuda_graphs`); ignored on
            the CPU.
    """

    def __init__(self, registry: Callable[[], ModelRegistry], max_batch: int,
                 max_wait_ms: float, cuda_graphs: bool = False) -> None:
        self._registry = registry
        self._batchers = BatcherPool(max_batch, max_wait_ms)
        self.max_batch = max_batch
        self.cuda_graphs = cuda_graphs
        self._graphs: dict[str, tuple[str, GraphedSegments]] = {}
        self._graphs_lock = threading.Lock()

    def graphs(self, model: RegisteredModel) -> GraphedSegments | None:
        """The CUDA graphs that run `model`'s segments, made on first use (one per model name,
        replaced when the model is reloaded), or None on the CPU or with `cuda_graphs` off."""
        if not self.cuda_graphs or model.device == "cpu":
            return None
        with self._graphs_lock:
            found = self._graphs.get(model.name)
            if found is None or found[0] != model.version:
                found = self._graphs[model.name] = (
                    model.version, GraphedSegments(model.module, self.max_batch))
            return found[1]

    def prepare(self, registry: ModelRegistry) -> None:
        """Captures the batch-1 graphs of every reasoning model now (one "paper" segment on its
        task's placeholder grid) rather than on the first request; blocking, call it off the
        event loop. Nothing to do on the CPU."""
        for model in registry.list():
            step = self.graphs(model) if model.is_reasoning and model.task is not None else None
            if step is not None:
                inputs = model.task.encode(model.task.placeholder())[None]
                # two segments: the initial carry's graph, then the returned carry's
                solve_batch(model.module, inputs, np.full(1, 2, dtype=np.int64),
                            np.zeros(1, dtype=bool), step)

    def model(self, name: str) -> RegisteredModel:
        """The reasoning model called `name`.

        Raises:
            Unavailable: the registry is loading or holds no model.
            InvalidArgument("model"): empty or unknown name.
            FailedPrecondition: the model is not an HRM/TRM, or its checkpoint names no task.
        """
        if not name:
            raise InvalidArgument("model", "a reasoning model name is required, e.g. "
                                           "\"trm-sudoku6\"")
        registry = self._registry()
        if len(registry) == 0:
            raise Unavailable(f"no checkpoint is loaded (models folder {registry.models_dir})")
        model = registry.find(name)
        if model is None:
            loaded = [m.name for m in registry.list() if m.is_reasoning]
            raise InvalidArgument("model", f"unknown model {name!r}; reasoning models loaded: "
                                           f"{loaded}")
        if not model.is_reasoning:
            raise FailedPrecondition(f"model {name!r} is a {model.architecture} network, not a "
                                     "reasoning model (HRM or TRM); it cannot solve grids")
        if model.task is None:
            raise FailedPrecondition(f"model {name!r} has no task in its checkpoint metadata, so "
                                     "its grid alphabet is unknown")
        return model

    async def solve(self, name: str, grid: str, mode: str = "paper",
                    max_segments: int | None = None) -> Solution:
        """Runs model `name` on `grid` and returns every segment's prediction.

        Args:
            name: a reasoning model of the registry.
            grid: row-major, one character per cell, in the model task's alphabet.
            mode: "paper" (exactly max_segments segments) or "act" (stop at the first halt).
            max_segments: 1..MAX_SEGMENTS; None takes the model's `halt_max_steps`.
        Raises:
            InvalidArgument("model"), Unavailable, FailedPrecondition: see `model`.
            InvalidArgument("grid"): wrong length or characters (see `GridTask.encode`).
            InvalidArgument("max_segments"): outside 1..MAX_SEGMENTS.
            ValueError: an unknown mode (the servicer maps the enum).
        """
        started = time.perf_counter()
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
        model = self.model(name)
        if max_segments is None:
            max_segments = min(model.module.config.halt_max_steps, MAX_SEGMENTS)
        if not 1 <= max_segments <= MAX_SEGMENTS:
            raise InvalidArgument("max_segments", f"{max_segments} is outside 1..{MAX_SEGMENTS}")
        task = model.task
        inputs = task.encode(grid)[None]
        module = model.module
        step = self.graphs(model)

        def run_batch(batch_inputs: np.ndarray, batch_segments: np.ndarray,
                      batch_act: np.ndarray):
            return solve_batch(module, batch_inputs, batch_segments, batch_act, step)

        predictions, halt_probabilities, used = await self._batchers.submit(
            model.name, model.version, run_batch, inputs,
            np.array([max_segments], dtype=np.int64), np.array([mode == "act"]))
        count = int(used[0])
        segments = [SegmentPrediction(task.decode(predictions[0, s]),
                                      float(halt_probabilities[0, s])) for s in range(count)]
        return Solution(model=model, grid=segments[-1].grid, segments=segments,
                        segments_used=count, halt_probability=segments[-1].halt_probability,
                        latency_ms=(time.perf_counter() - started) * 1000.0)

    def batcher(self, name: str) -> DynamicBatcher | None:
        """The batcher of model `name` once it served a request (for metrics and tests)."""
        return self._batchers.get(name)

    async def close(self) -> None:
        """Closes every batcher; queued requests fail with Unavailable."""
        await self._batchers.close()
