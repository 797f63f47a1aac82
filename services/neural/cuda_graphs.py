"""CUDA graphs for the neural service's fixed-shape forward passes on a GPU.

The served networks are small: a Connect Four policy/value pass is a few dozen kernels, a TRM
segment a few hundred, each of them microseconds of GPU work at batch 1. Launched one by one from
Python they are bound by the host's launch cost, not by the GPU (issue 12 found TRM at batch 1
slower on an H100 than on the CPU). A CUDA graph records one forward pass's kernels once and
replays them with a single launch (PyTorch "CUDA Graphs" notes, `torch.cuda.CUDAGraph`; the same
device as vLLM's decode graphs). A graph has fixed shapes and addresses, so each padded batch size
gets its own graph with static input and output tensors: a call copies its rows into the
inputs, replays, and reads its rows of the outputs.

Batches are padded to the next power of two up to the batcher's `max_batch`. The padded rows hold
whatever an earlier call left there (valid inputs: rows an earlier request sent), and their outputs
are dropped; rows never interact in these networks (convolutions, attention and normalisation
work within a row), so padding changes no row's arithmetic beyond rounding: a padded batch is
another matrix shape, for which cuBLAS may pick another kernel (in bf16 the TRM's halting logits
came out 2 ulps apart on an H100, its predictions identical). A batch larger than `max_batch`
runs eagerly. Replays of one model's graphs hold a lock: their static tensors are shared.

Used only on CUDA, where `NeuralSettings.cuda_graphs` is on; `bench/neural_runtime.py` (policy/
value) and `bench/reasoning_inference.py` (HRM/TRM) time them against eager torch on the same GPU.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from services.neural.models.connect4_pv import (
    PLANES,
    Connect4PV,
    PolicyValueProbabilities,
    predict,
)
from services.neural.models.precision import autocast

WARM_UP_PASSES = 2
"""Eager passes on a side stream before a capture (lazy initialisation of cuBLAS handles and
kernels must not happen inside a capture)."""


def padded_size(rows: int, max_rows: int) -> int | None:
    """The power of two at least `rows` (capped at `max_rows`), or None when rows > max_rows.

    Raises:
        ValueError: rows < 1.
    """
    if rows < 1:
        raise ValueError(f"a batch needs at least one row, got {rows}")
    if rows > max_rows:
        return None
    return min(1 << (rows - 1).bit_length(), max_rows)


def padded_sizes(max_rows: int) -> list[int]:
    """Every size `padded_size` returns for 1..max_rows: 1, 2, 4, ... and max_rows."""
    sizes = [1 << k for k in range(max_rows.bit_length()) if 1 << k < max_rows]
    return [*sizes, max_rows]


def capture(forward: Callable[..., Any], inputs: Sequence[torch.Tensor]
            ) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Records `forward(*inputs)` into a CUDA graph after `WARM_UP_PASSES` eager passes on a side
    stream; returns the graph and the outputs it writes on each replay. Call under
    `torch.inference_mode()` with the inputs on the current CUDA device.

    Raises:
        RuntimeError: the forward pass cannot be captured (e.g. it reads a value on the host).
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARM_UP_PASSES):
            forward(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = forward(*inputs)
    return graph, outputs


class GraphedPolicyValue:
    """A Connect Four policy/value network on CUDA, run by replaying one CUDA graph per padded
    batch size (float32, as eager `connect4_pv.predict` runs it).

    Args:
        network: the loaded `Connect4PV` on a CUDA device, in eval mode; it is not changed.
        max_batch: the largest batch a graph is captured for (the batcher's `max_batch`).
    Raises:
        ValueError: the network is not on a CUDA device.
    """

    def __init__(self, network: Connect4PV, max_batch: int) -> None:
        self.device = next(network.parameters()).device
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a network on a CUDA device, not {self.device}")
        self.module = PolicyValueProbabilities(network).eval()
        self.max_batch = max_batch
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor,
                                      torch.Tensor, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def capture_all(self) -> None:
        """Captures every padded size now (at start-up) rather than on first use."""
        with self._lock, torch.inference_mode(), torch.cuda.device(self.device):
            for size in padded_sizes(self.max_batch):
                self._entry(size)

    def _entry(self, size: int):
        entry = self._graphs.get(size)
        if entry is None:
            config = self.module.network.config
            planes = torch.zeros((size, PLANES, config.rows, config.columns), device=self.device)
            legal = torch.ones((size, config.policy_size), dtype=torch.bool,
                               device=self.device)
            graph, (policy, value) = capture(self.module, (planes, legal))
            entry = self._graphs[size] = (graph, planes, legal, policy, value)
        return entry

    def predict(self, planes: np.ndarray, legal: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Same contract as `connect4_pv.predict`: planes float32 [B, 2, H, W], legal bool [B, W]
        (the network's board) -> policy float32 [B, W], value float32 [B]."""
        rows = len(planes)
        size = padded_size(rows, self.max_batch)
        if size is None:
            return predict(self.module.network, planes, legal)
        with self._lock, torch.inference_mode(), torch.cuda.device(self.device):
            graph, in_planes, in_legal, policy, value = self._entry(size)
            in_planes[:rows].copy_(torch.from_numpy(np.ascontiguousarray(planes)))
            in_legal[:rows].copy_(torch.from_numpy(np.ascontiguousarray(legal)))
            graph.replay()
            return policy[:rows].cpu().numpy(), value[:rows].cpu().numpy()


@dataclass
class _SegmentGraph:
    graph: torch.cuda.CUDAGraph
    carry: list[torch.Tensor]
    inputs: torch.Tensor
    puzzle_identifiers: torch.Tensor
    out_carry: Any
    output: Any


def _fields(value: Any) -> dict[str, torch.Tensor]:
    """The tensors of a carry or output dataclass (`TRMCarry`, `HRMOutput`, ...), by name;
    None fields are kept as None."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


class GraphedSegments:
    """One deep-supervision segment of an HRM or TRM, `model(carry, inputs, puzzle_identifiers)`,
    replayed from CUDA graphs: a drop-in `step` for `reasoning_segments.run_segments`.

    A graph is captured per (padded batch size, dtypes of the carry and inputs): the first segment
    receives the float32 initial carry and later ones the carry the model returns (bf16 under
    autocast), so each runs on the dtypes the eager pass would see. Captured under bf16 autocast
    with its weight cache off (see `act.autocast`), as eager serving runs under bf16 autocast.
    The returned carry and outputs are copies: a later replay cannot overwrite them.

    Args:
        model: an HRM or TRM on a CUDA device, in eval mode.
        max_batch: the largest padded batch captured; larger batches run eagerly.
    Raises:
        ValueError: the model is not on a CUDA device.
    """

    def __init__(self, model: nn.Module, max_batch: int) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        if self.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a model on a CUDA device, not {self.device}")
        self.max_batch = max_batch
        self._graphs: dict[tuple, _SegmentGraph] = {}
        self._lock = threading.Lock()

    def __call__(self, carry: Any, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor
                 ) -> tuple[Any, Any]:
        rows = inputs.shape[0]
        size = padded_size(rows, self.max_batch)
        if size is None:
            with autocast(self.device):
                return self.model(carry, inputs, puzzle_identifiers)
        state = _fields(carry)
        key = (size, inputs.dtype, puzzle_identifiers.dtype,
               tuple((name, tensor.dtype) for name, tensor in state.items()))
        with self._lock, torch.inference_mode(), torch.cuda.device(self.device):
            entry = self._graphs.get(key)
            if entry is None:
                entry = self._graphs[key] = self._capture(carry, inputs, puzzle_identifiers, size)
            for static, tensor in zip(entry.carry, state.values(), strict=True):
                static[:rows].copy_(tensor)
            entry.inputs[:rows].copy_(inputs)
            entry.puzzle_identifiers[:rows].copy_(puzzle_identifiers)
            entry.graph.replay()
            return (_rows(entry.out_carry, rows), _rows(entry.output, rows))

    def _capture(self, carry: Any, inputs: torch.Tensor, puzzle_identifiers: torch.Tensor,
                 size: int) -> _SegmentGraph:
        names = list(_fields(carry))
        static_carry = [_padded(tensor, size) for tensor in _fields(carry).values()]
        static_inputs = _padded(inputs, size)
        static_ids = _padded(puzzle_identifiers, size)
        carry_type = type(carry)

        def forward(*tensors: torch.Tensor):
            *state, tokens, ids = tensors
            with autocast(self.device, cache_enabled=False):
                return self.model(carry_type(**dict(zip(names, state, strict=True))), tokens,
                                  ids)

        graph, (out_carry, output) = capture(forward, [*static_carry, static_inputs, static_ids])
        return _SegmentGraph(graph, static_carry, static_inputs, static_ids, out_carry, output)


def _padded(tensor: torch.Tensor, size: int) -> torch.Tensor:
    """A new [size, ...] tensor whose first rows are `tensor`'s and the rest copies of its row 0
    (valid inputs for the padded rows of a capture)."""
    padded = tensor[:1].expand(size, *tensor.shape[1:]).clone()
    padded[:tensor.shape[0]].copy_(tensor)
    return padded


def _rows(value: Any, rows: int) -> Any:
    """A copy of a carry or output dataclass cut to its first `rows` rows."""
    return type(value)(**{name: None if tensor is None else tensor[:rows].clone()
                          for name, tensor in _fields(value).items()})
