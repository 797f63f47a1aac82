"""Evaluates Connect Four positions with the registry's policy/value networks, batching concurrent
requests per model (one `DynamicBatcher` each, replaced when the model is reloaded). No gRPC here:
the servicer validates requests and calls `evaluate`.

No torch here either: the runners come from `services.neural.runners` (imported on the first
model to prepare), or from the fast start's cached graphs (`services.neural.fast_start`), which
serve while the complete registry is still loading; a request for a model the partial registry
lacks waits for the complete one."""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Literal

import numpy as np

from libs.connect4.geometry import STANDARD, Board
from libs.errors import FailedPrecondition, InvalidArgument, NotFound, Unavailable
from services.neural import architectures
from services.neural.batcher import BatcherPool, DynamicBatcher
from services.neural.onnx_graphs import GraphCache
from services.neural.registry import ModelRegistry, RegisteredModel

log = logging.getLogger(__name__)

Predict = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class PositionEvaluator:
    """Owns the registry once loaded and a batcher per model.

    Args:
        default_model: the model used when a request names none.
        max_batch: most positions per forward pass.
        max_wait_ms: how long a request waits for others to join its batch, in milliseconds.
        runtime: what runs a network on the CPU: "onnxruntime" (`OnnxPolicyValue`, made once per
            model version; torch when the export fails) or "torch". On a GPU, always torch.
        cpu_threads: intra-op threads of onnxruntime (0: its default).
        cuda_graphs: on a GPU, replay one CUDA graph per padded batch size
            (`cuda_graphs.GraphedPolicyValue`, captured when the model is prepared) instead of
            launching torch's kernels one by one; torch when a capture fails.
        graph_cache: where exported ONNX graphs are kept for the next start (None: not kept).
    """

    def __init__(self, default_model: str, max_batch: int, max_wait_ms: float,
                 runtime: Literal["onnxruntime", "torch"] = "onnxruntime",
                 cpu_threads: int = 1, cuda_graphs: bool = False,
                 graph_cache: GraphCache | None = None) -> None:
        self.default_model = default_model
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self.runtime = runtime
        self.cpu_threads = cpu_threads
        self.cuda_graphs = cuda_graphs
        self.graph_cache = graph_cache
        self._registry: ModelRegistry | None = None
        self._complete = asyncio.Event()
        self._failure: str | None = None
        self._batchers = BatcherPool(max_batch, max_wait_ms)
        self._runners: dict[tuple[str, str], Predict] = {}
        self._runners_lock = threading.Lock()

    def install(self, registry: ModelRegistry, runners: dict[tuple[str, str], Predict] | None = None
                ) -> None:
        """Makes `registry` the one served (called by the service's ready hook); `runners`
        (name, version) -> predict are used as they are instead of being made (the fast
        start's onnxruntime sessions). A complete registry releases the requests waiting for
        one."""
        if runners:
            with self._runners_lock:
                self._runners.update(runners)
        self._registry = registry
        if registry.complete:
            self._complete.set()

    def fail(self, reason: str) -> None:
        """The complete registry will not come (its loading failed after the fast start): the
        readiness probe reports `reason`, and requests waiting for it get Unavailable."""
        self._failure = reason
        self._complete.set()

    async def complete_registry(self) -> ModelRegistry:
        """The complete registry, once installed (at once when it already is).

        Raises:
            Unavailable: its loading failed (`fail`).
        """
        await self._complete.wait()
        if self._failure is not None:
            raise Unavailable(f"the models failed to load: {self._failure}")
        return self.registry

    async def find_model(self, name: str) -> RegisteredModel:
        """`model(name)`, waiting for the complete registry when the partial one lacks it.

        Raises: as `model`, and Unavailable when the complete registry failed to load.
        """
        registry = self._registry
        if registry is None or registry.complete or registry.find(name or
                                                                  self.default_model):
            return self.model(name)
        await self.complete_registry()
        return self.model(name)

    def prepare(self, registry: ModelRegistry) -> None:
        """Makes the runner of every policy/value network of `registry` now (the ONNX export
        takes about 0.5 s per model, the CUDA graphs' capture about as long) rather than on its
        first request; blocking, call it off the event loop."""
        for model in registry.list():
            if model.board is not None:  # the Connect Four networks, which EvaluatePositions runs
                self.runner(model)

    def runner(self, model: RegisteredModel) -> Predict:
        """What computes `model`'s policy and value: see the class doc's `runtime`."""
        key = (model.name, model.version)
        found = self._runners.get(key)
        if found is not None:
            return found
        with self._runners_lock:
            found = self._runners.get(key)
            if found is None:
                found = self._runners[key] = self._make_runner(model)
        return found

    def _make_runner(self, model: RegisteredModel) -> Predict:
        runners = importlib.import_module("services.neural.runners")  # torch: not at start-up
        return runners.make_runner(model, self.runtime, self.cpu_threads, self.cuda_graphs,
                                   self.max_batch, self.graph_cache)

    @property
    def registry(self) -> ModelRegistry:
        """The loaded registry. Raises Unavailable before `install`."""
        if self._registry is None:
            raise Unavailable("the model registry is still loading")
        return self._registry

    async def readiness(self) -> str | None:
        """The service's readiness probe: None once a registry holding at least one model is
        installed, else why not (still loading, or the models folder held no checkpoint; a later
        ReloadModel that loads one makes the service ready; or, after a fast start, the
        complete registry failed to load)."""
        if self._failure is not None:
            return f"the models failed to load: {self._failure}"
        if self._registry is None:
            return "the models are still loading"
        if len(self._registry) == 0:
            return f"no checkpoint is loaded (models folder {self._registry.models_dir})"
        return None

    def model(self, name: str) -> RegisteredModel:
        """The model called `name` ("" is the default model).

        Raises:
            Unavailable: no registry yet, or it holds no checkpoint.
            NotFound: no model of that name.
        """
        return self.registry.get(name or self.default_model)

    def network_for(self, name: str, board: Board = STANDARD) -> RegisteredModel:
        """The policy/value network that evaluates positions on `board`.

        `name` given: that model, which must play `board`. `name` empty: on the standard 7x6
        board the default model, as before boards had a size; on another board the default model
        when it plays that board, else the loaded network of that board first by name.

        Raises:
            Unavailable: no registry yet, or it holds no checkpoint.
            NotFound: no model called `name` (or, on 7x6, no default model).
            InvalidArgument("model"): the model is not a Connect Four policy/value network.
            FailedPrecondition: the model plays another board, or (`name` empty) no loaded
                network plays `board`; the message names both boards.
        """
        if name or board == STANDARD:
            model = self.model(name)
            if model.board is None:  # another architecture, or a network of another game
                kind = ("a network of another game" if model.architecture ==
                        architectures.CONNECT4_PV else f"a {model.architecture}")
                raise InvalidArgument("model", f"{model.name!r} is {kind}, not a Connect Four "
                                               f"policy/value network")
            if model.board != board:
                raise FailedPrecondition(
                    f"model {model.name!r} plays the {model.board.name} board; the positions are "
                    f"on {board.name}{self._networks_of(board)}")
            return model
        models = self.registry.list()
        if not models:
            self.model(name)  # raises Unavailable, as for any request while none is loaded
        default = self.registry.find(self.default_model)
        if default is not None and default.board == board:
            return default
        for model in models:
            if model.board == board:
                return model
        raise FailedPrecondition(f"no policy/value network of the {board.name} board is loaded"
                                 f"{self._networks_of(None)}")

    def _networks_of(self, board: Board | None) -> str:
        """"; loaded for <board>: a, b" (every board's networks when `board` is None), or ""."""
        networks = [model for model in self.registry.list() if model.board is not None
                    and (board is None or model.board == board)]
        if not networks:
            return ""
        where = f" for {board.name}" if board is not None else ""
        return f"; loaded{where}: " + ", ".join(f"{model.name} ({model.board.name})"
                                                for model in networks)

    async def evaluate(self, name: str, planes: np.ndarray, legal: np.ndarray,
                       board: Board = STANDARD) -> tuple[RegisteredModel, np.ndarray, np.ndarray]:
        """Policy and value of each position, computed in shared batches.

        Args:
            name: model name; "" is the default model, or on another board than 7x6 the
                network of that board (see `network_for`).
            planes: float32 [N, 2, H, W] from `libs.connect4.board.encode`, N >= 1, every
                position on `board` (H rows, W columns).
            legal: bool [N, W] from `libs.connect4.board.legal_mask`, a True in every row.
            board: the positions' board.
        Returns:
            The model that answered, policy float32 [N, W] (0 on illegal columns, rows sum to 1)
            and value float32 [N] in [-1, 1] for the player to move.
        Raises:
            Unavailable, NotFound, InvalidArgument("model"), FailedPrecondition: see
                `network_for`.
        """
        try:
            model = self.network_for(name, board)
        except (NotFound, FailedPrecondition, InvalidArgument):
            if self._registry is None or self._registry.complete:
                raise
            await self.complete_registry()  # the partial registry may lack it: wait, then ask
            model = self.network_for(name, board)
        run_batch = self._runners.get((model.name, model.version))
        if run_batch is None:  # a model reloaded since `prepare`: its export runs off the loop
            run_batch = await asyncio.to_thread(self.runner, model)
        policy, value = await self._batchers.submit(model.name, model.version, run_batch, planes,
                                                    legal)
        return model, policy, value

    def batcher(self, name: str) -> DynamicBatcher | None:
        """The batcher of model `name` once it served a request (for metrics and tests)."""
        return self._batchers.get(name or self.default_model)

    async def close(self) -> None:
        """Closes every batcher; queued requests fail with Unavailable."""
        await self._batchers.close()
