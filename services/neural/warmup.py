"""The warm-up forward pass run on every model before it serves (at start-up and on reload)."""

from __future__ import annotations

import numpy as np
import torch

from libs.connect4.board import Position, encode, legal_mask
from services.neural.models import connect4_pv, router_gru, router_text
from services.neural.reasoning_solver import solve_batch
from services.neural.registry import RegisteredModel


def warm_up(model: RegisteredModel) -> None:
    """One forward pass of `model` on a placeholder input: the empty Connect Four board (of the
    network's board size) for a policy/value network, one step of features all 0.5 for a
    meta-controller, a short question for a text router, a blank grid of its task for a reasoning
    model (one segment). The first request then pays no lazy
    initialisation, and a model that cannot run fails before serving.

    Raises:
        RuntimeError, ValueError: the forward pass failed (e.g. weights that do not fit).
    """
    with torch.inference_mode():
        if model.architecture == connect4_pv.ARCHITECTURE and model.board is not None:
            start = Position.from_moves("", model.board)
            connect4_pv.predict(model.module, np.repeat(encode(start)[None], 2, 0),
                                np.repeat(legal_mask(start)[None], 2, 0))
        elif model.architecture == connect4_pv.ARCHITECTURE:  # another game's network
            config = model.module.config
            connect4_pv.predict(model.module,
                                np.zeros((2, connect4_pv.PLANES, config.rows, config.columns),
                                         dtype=np.float32),
                                np.ones((2, config.policy_size), dtype=np.bool_))
        elif model.architecture == router_gru.ARCHITECTURE:
            router_gru.predict(model.module, [[0.5] * model.module.config.num_features])
        elif model.architecture == router_text.ARCHITECTURE:
            router_text.predict(model.module, "How many apples are left?")
        elif model.task is not None:
            inputs = model.task.encode(model.task.placeholder())[None]
            solve_batch(model.module, inputs, np.ones(1, dtype=np.int64), np.zeros(1, dtype=bool))
