"""The part of the neural service that needs torch (the HRM/TRM solver, the routers, the warm-up
of a reloaded model), handed to the servicer once torch has loaded every checkpoint. After a fast
start (`services.neural.fast_start`) the service answers Connect Four evaluations from cached
graphs before that; a request that needs torch meanwhile waits for it (within its deadline).
No torch here: `services.neural.torch_start` builds the `TorchOps`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from libs.errors import Unavailable
from services.neural.registry import RegisteredModel


@dataclass(frozen=True)
class TorchOps:
    """The torch-backed operations of the servicer.

    solver: the `reasoning_solver.ReasoningSolver` of `Solve`.
    warm_up: one forward pass of a freshly (re)loaded model (`warmup.warm_up`).
    predict_route: a meta-controller's route probabilities for routing steps
        (`router_gru.predict`: model, steps [T][F] floats in [0, 1] -> one float per route).
    predict_text_route: a text router's route probabilities for a query
        (`router_text.predict`: model, query -> one float per route; blocking, milliseconds).
    """

    solver: Any
    warm_up: Callable[[RegisteredModel], None]
    predict_route: Callable[[RegisteredModel, list[list[float]]], list[float]]
    predict_text_route: Callable[[RegisteredModel, str], list[float]]


class TorchSide:
    """Holds the `TorchOps` once attached; `get` waits for them."""

    def __init__(self) -> None:
        self._attached = asyncio.Event()
        self._ops: TorchOps | None = None
        self._failure: str | None = None

    def attach(self, ops: TorchOps) -> None:
        """Makes `ops` available and releases the waiting requests."""
        self._ops = ops
        self._attached.set()

    def fail(self, reason: str) -> None:
        """Torch's side will not come (loading failed): waiting and later requests get
        Unavailable with `reason`."""
        self._failure = reason
        self._attached.set()

    @property
    def ops(self) -> TorchOps | None:
        """The ops when attached, else None (no wait)."""
        return self._ops

    async def get(self) -> TorchOps:
        """The ops, waiting until they are attached.

        Raises:
            Unavailable: loading them failed (`fail`).
        """
        await self._attached.wait()
        if self._ops is None:
            raise Unavailable(f"the models failed to load: {self._failure}")
        return self._ops
