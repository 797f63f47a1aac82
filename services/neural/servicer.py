"""gRPC edge of the neural service: validates requests, turns protos into calls of the
`PositionEvaluator` (Connect Four), the `ReasoningSolver` (HRM/TRM on grids) and the registry's
reload, and back. Errors are domain errors; libs.server maps them to status codes.

No torch is imported here: what needs it (the solver, the routers, a reload's warm-up) comes
through `torch_side.TorchSide` once torch has loaded the models, and a request that needs it
waits for it (`services.neural.fast_start`)."""

from __future__ import annotations

import asyncio
import math
import re
from typing import TYPE_CHECKING

import numpy as np
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.board import encode, legal_mask
from libs.connect4.geometry import Board
from libs.connect4_messages import board_message, parse_board, parse_position
from libs.errors import FailedPrecondition, InvalidArgument
from libs.telemetry import set_work_attributes
from services.neural import architectures
from services.neural.evaluator import PositionEvaluator
from services.neural.registry import RegisteredModel
from services.neural.torch_side import TorchSide

if TYPE_CHECKING:
    from services.neural.reasoning_solver import Solution

MAX_POSITIONS = 1024
HALTING_MODES = {
    neural_service_pb2.HALTING_MODE_UNSPECIFIED: "paper",
    neural_service_pb2.HALTING_MODE_PAPER: "paper",
    neural_service_pb2.HALTING_MODE_ACT: "act",
}
MAX_ROUTE_STEPS = 64
"""Routing steps a PredictRoute request may carry at most."""
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
"""A checkpoint directory name ReloadModel accepts: no path separators, not hidden."""


def model_proto(model: RegisteredModel) -> neural_service_pb2.Model:
    """The `Model` message of a registry entry."""
    message = neural_service_pb2.Model(
        name=model.name, version=model.version, architecture=model.architecture,
        parameter_count=model.parameter_count, device=model.device,
        metadata=model.metadata_strings(), task=model.task_name,
    )
    if model.board is not None:
        message.board.CopyFrom(board_message(model.board))
    return message


def solve_response(solution: Solution) -> neural_service_pb2.SolveResponse:
    """The `SolveResponse` of a solved request."""
    return neural_service_pb2.SolveResponse(
        grid=solution.grid,
        segments=[neural_service_pb2.SegmentPrediction(grid=s.grid,
                                                       halt_probability=s.halt_probability)
                  for s in solution.segments],
        segments_used=solution.segments_used, halt_probability=solution.halt_probability,
        latency_ms=solution.latency_ms, model=model_proto(solution.model))


def parse_positions(positions) -> tuple[Board, np.ndarray, np.ndarray]:
    """The board of the request's positions, their planes float32 [N, 2, H, W] and legal masks
    bool [N, W] (H rows, W columns: 6 and 7 on the standard board).

    Raises:
        InvalidArgument("positions"): none, or more than `MAX_POSITIONS`.
        InvalidArgument("positions[i].board.columns", "positions[i].board.rows"): a board
            outside the limits (`libs.connect4_messages.parse_board`).
        InvalidArgument("positions[i].board"): another board than the first position's.
        InvalidArgument("positions[i].moves"): malformed, illegal on the board, or a finished
            game.
    """
    if not positions:
        raise InvalidArgument("positions", "at least one position is required")
    if len(positions) > MAX_POSITIONS:
        raise InvalidArgument("positions", f"{len(positions)} positions; at most {MAX_POSITIONS}")
    board = parse_board(positions[0], "positions[0]")
    planes = np.empty((len(positions), 2, board.rows, board.columns), dtype=np.float32)
    legal = np.empty((len(positions), board.columns), dtype=np.bool_)
    for index, proto in enumerate(positions):
        field = f"positions[{index}]"
        if index and parse_board(proto, field) != board:
            raise InvalidArgument(f"{field}.board",
                                  f"is {parse_board(proto, field).name}; every position of a "
                                  f"request is on the same board (positions[0] is on "
                                  f"{board.name})")
        position = parse_position(proto, field)
        planes[index] = encode(position)
        legal[index] = legal_mask(position)
    return board, planes, legal


def parse_steps(steps, num_features: int) -> list[list[float]]:
    """The routing steps of a PredictRoute request as lists of floats.

    Raises:
        InvalidArgument("steps"): none, or more than `MAX_ROUTE_STEPS`.
        InvalidArgument("steps[i].features"): not `num_features` values, or a value outside
            [0, 1] or not finite.
    """
    if not steps:
        raise InvalidArgument("steps", "at least one routing step is required")
    if len(steps) > MAX_ROUTE_STEPS:
        raise InvalidArgument("steps", f"{len(steps)} steps; at most {MAX_ROUTE_STEPS}")
    parsed = []
    for index, step in enumerate(steps):
        values = list(step.features)
        if len(values) != num_features:
            raise InvalidArgument(f"steps[{index}].features",
                                  f"{len(values)} values; the model takes {num_features}")
        if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
            raise InvalidArgument(f"steps[{index}].features",
                                  "every value must be finite and in [0, 1]")
        parsed.append(values)
    return parsed


def parse_query(query: str) -> str:
    """The query of a PredictTextRoute request.

    Raises:
        InvalidArgument("query"): empty, blank, or longer than
            `architectures.TEXT_ROUTER_MAX_QUERY_CHARS`.
    """
    if not query.strip():
        raise InvalidArgument("query", "a non-blank query is required")
    if len(query) > architectures.TEXT_ROUTER_MAX_QUERY_CHARS:
        raise InvalidArgument("query", f"{len(query)} characters; at most "
                                       f"{architectures.TEXT_ROUTER_MAX_QUERY_CHARS}")
    return query


class NeuralServicer(neural_service_pb2_grpc.NeuralServiceServicer):
    """NeuralService over a `PositionEvaluator` and, once torch has loaded the models, the
    `TorchSide`'s solver and routers (sharing the evaluator's registry)."""

    def __init__(self, evaluator: PositionEvaluator, torch_side: TorchSide) -> None:
        self._evaluator = evaluator
        self._torch = torch_side
        self._model_messages: dict[str, tuple[RegisteredModel, neural_service_pb2.Model]] = {}

    def _model_message(self, model: RegisteredModel) -> neural_service_pb2.Model:
        """`model_proto(model)`, built once per loaded model (a reload loads a new one): every
        EvaluatePositions response carries it, and building its metadata map cost about 12 us
        of a call's CPU, copying the built message a third of that."""
        cached = self._model_messages.get(model.name)
        if cached is None or cached[0] is not model:
            cached = self._model_messages[model.name] = (model, model_proto(model))
        return cached[1]

    async def EvaluatePositions(self, request, context):
        # Resolve a named model first: an unknown model is NOT_FOUND whatever the positions are.
        if request.model:
            await self._evaluator.find_model(request.model)
        board, planes, legal = parse_positions(request.positions)
        model, policy, value = await self._evaluator.evaluate(request.model, planes, legal,
                                                              board)
        set_work_attributes({"mesh.neural.model": model.name,
                             "mesh.neural.batch_size": len(planes)})
        evaluations = [
            neural_service_pb2.PositionEvaluation(policy=row.tolist(), value=float(v))
            for row, v in zip(policy, value, strict=True)
        ]
        response = neural_service_pb2.EvaluatePositionsResponse(evaluations=evaluations)
        response.model.CopyFrom(self._model_message(model))
        return response

    async def ListModels(self, request, context):
        registry = await self._evaluator.complete_registry()
        return neural_service_pb2.ListModelsResponse(
            models=[model_proto(model) for model in registry.list()]
        )

    async def GetModel(self, request, context):
        if not request.name:
            raise InvalidArgument("name", "a model name is required")
        return neural_service_pb2.GetModelResponse(model=model_proto(
            await self._evaluator.find_model(request.name)))

    async def Solve(self, request, context):
        mode = HALTING_MODES.get(request.halting_mode)
        if mode is None:
            raise InvalidArgument("halting_mode", f"unknown halting mode {request.halting_mode}")
        max_segments = request.max_segments if request.HasField("max_segments") else None
        ops = await self._torch.get()
        solution = await ops.solver.solve(request.model, request.grid, mode, max_segments)
        set_work_attributes({"mesh.neural.model": solution.model.name,
                             "mesh.neural.batch_size": 1,
                             "mesh.neural.segments": solution.segments_used})
        return solve_response(solution)

    async def ReloadModel(self, request, context):
        if not request.name:
            raise InvalidArgument("name", "a model name is required")
        if not MODEL_NAME.match(request.name):
            # A name longer than a file name may be (ENAMETOOLONG) is the client's mistake; the
            # message quotes only its start so the error stays small.
            raise InvalidArgument("name", f"{request.name[:100]!r} is not a checkpoint directory "
                                          "name (1-100 letters, digits, '.', '_', '-'; no path)")
        ops = await self._torch.get()
        registry = await self._evaluator.complete_registry()
        model = await asyncio.to_thread(registry.reload, request.name, ops.warm_up)
        return neural_service_pb2.ReloadModelResponse(model=model_proto(model))

    async def PredictRoute(self, request, context):
        if not request.model:
            raise InvalidArgument("model", "a meta-controller model name is required")
        ops = await self._torch.get()
        model = self._evaluator.registry.get(request.model)
        if model.architecture != architectures.ROUTER_GRU:
            raise FailedPrecondition(f"model {model.name!r} is a {model.architecture}, not a "
                                     f"meta-controller ({architectures.ROUTER_GRU})")
        config = model.module.config  # router_gru.RouterGRUConfig
        steps = parse_steps(request.steps, config.num_features)
        # A GRU of a few thousand weights over a few steps: tens of microseconds, run inline.
        probabilities = ops.predict_route(model, steps)
        set_work_attributes({"mesh.neural.model": model.name,
                             "mesh.neural.route_steps": len(steps)})
        return neural_service_pb2.PredictRouteResponse(
            routes=[neural_service_pb2.RouteProbability(route=route, probability=p)
                    for route, p in zip(config.routes, probabilities, strict=True)],
            model=model_proto(model))

    async def PredictTextRoute(self, request, context):
        if not request.model:
            raise InvalidArgument("model", "a text router model name is required")
        query = parse_query(request.query)
        ops = await self._torch.get()
        model = self._evaluator.registry.get(request.model)
        if model.architecture != architectures.ROUTER_TEXT:
            raise FailedPrecondition(f"model {model.name!r} is a {model.architecture}, not a "
                                     f"text router ({architectures.ROUTER_TEXT})")
        config = model.module.config  # router_text.RouterTextConfig
        # A 6-layer encoder over up to 128 word pieces: milliseconds of CPU, off the event loop.
        probabilities = await asyncio.to_thread(ops.predict_text_route, model, query)
        set_work_attributes({"mesh.neural.model": model.name})
        return neural_service_pb2.PredictTextRouteResponse(
            routes=[neural_service_pb2.RouteProbability(route=route, probability=p)
                    for route, p in zip(config.routes, probabilities, strict=True)],
            model=model_proto(model))
