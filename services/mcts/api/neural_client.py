"""The mcts service's client of the neural service: `EvaluatePositions` behind the plain async
call `services.mcts.batched.evaluators.EvaluatePositions` takes, so the search core stays
grpc-free."""

from __future__ import annotations

import grpc
import numpy as np
from mesh.common.v1 import common_pb2
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.errors import (
    DeadlineExceeded,
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
        model: the model name ("" = the neural service's default model).
        timeout_s: deadline of each call, seconds.
    """

    def __init__(self, channel: grpc.aio.Channel, model: str, timeout_s: float) -> None:
        self._stub = neural_service_pb2_grpc.NeuralServiceStub(channel)
        self.model = model
        self.timeout_s = timeout_s

    async def __call__(self, moves: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Policy float32 [N, 7] (0 on full columns) and value float32 [N] for the player to move
        of each position (Pons move strings).

        Raises:
            NotFound: the neural service has no such model ("model").
            InvalidArgument("model"): the model is not a Connect Four network.
            Unavailable: the neural service is down or not ready.
            DeadlineExceeded: the call took longer than `timeout_s`.
        """
        request = neural_service_pb2.EvaluatePositionsRequest(
            model=self.model,
            positions=[common_pb2.ConnectFourPosition(moves=m) for m in moves])
        try:
            reply = await self._stub.EvaluatePositions(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as error:
            code = error.code()
            detail = f"neural service: {failure_detail(error)}"
            if code == grpc.StatusCode.NOT_FOUND:
                raise NotFound(detail) from error
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise InvalidArgument("model", detail) from error
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise DeadlineExceeded(detail) from error
            raise Unavailable(detail) from error
        policy = np.array([list(e.policy) for e in reply.evaluations], dtype=np.float32)
        value = np.array([e.value for e in reply.evaluations], dtype=np.float32)
        return policy, value
