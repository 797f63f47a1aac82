"""The mcts service's client of the neural service: `EvaluatePositions` behind the plain async
call `services.mcts.batched.evaluators.EvaluatePositions` takes, so the search core stays
grpc-free."""

from __future__ import annotations

import grpc
import numpy as np
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.geometry import STANDARD, Board
from libs.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
    failure_detail,
)


class NeuralPositionClient:
    """Evaluates Connect Four positions with one EvaluatePositions call.

    Args:
        channel: a channel to the neural service (`libs.channels.open_channel`), owned by the
            caller.
        model: the model name ("" = the neural service's default model, or on another board than
            7x6 its network of that board).
        timeout_s: deadline of each call, seconds.
        board: the board of every position evaluated.
    """

    def __init__(self, channel: grpc.aio.Channel, model: str, timeout_s: float,
                 board: Board = STANDARD) -> None:
        self._stub = neural_service_pb2_grpc.NeuralServiceStub(channel)
        self.model = model
        self.timeout_s = timeout_s
        self.board = board
        self._board_message = (None if board == STANDARD else
                               common_pb2.ConnectFourBoard(columns=board.columns, rows=board.rows))

    async def __call__(self, moves: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Policy float32 [N, W] (W the board's columns; 0 on full columns) and value float32 [N]
        for the player to move of each position (Pons move strings on `board`).

        Raises:
            NotFound: the neural service has no such model ("model").
            InvalidArgument("model"): the model is not a Connect Four network.
            FailedPrecondition: the model plays another board, or no network of the board is
                loaded (the neural service's message names the boards).
            Unavailable: the neural service is down or not ready.
            DeadlineExceeded: the call took longer than `timeout_s`.
        """
        request = neural_service_pb2.EvaluatePositionsRequest(
            model=self.model,
            positions=[common_pb2.ConnectFourPosition(moves=m, board=self._board_message)
                       for m in moves])
        try:
            reply = await self._stub.EvaluatePositions(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            detail = f"neural service: {failure_detail(error)}"
            if code == grpc.StatusCode.NOT_FOUND:
                raise NotFound(detail) from error
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument("model", detail) from error
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                raise FailedPrecondition(detail) from error
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise DeadlineExceeded(detail) from error
            raise Unavailable(detail) from error
        policy = np.array([list(e.policy) for e in reply.evaluations], dtype=np.float32)
        value = np.array([e.value for e in reply.evaluations], dtype=np.float32)
        return policy, value
