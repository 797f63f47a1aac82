"""The neural agent: a client of mesh.neural.v1.NeuralService.EvaluatePositions (the Connect Four
policy/value network). It proposes the legal column of highest policy; deterministic, so it runs
once per request. A position on another board than 7x6 goes to the neural service's network of
that board (the request names no model: the configured one plays 7x6)."""

from __future__ import annotations

import grpc
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.connect4.geometry import STANDARD
from libs.connect4_messages import position_message
from libs.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    Unavailable,
    failure_detail,
    propagate,
)
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.problems.connect_four import ConnectFourProblem


class NeuralAgent:
    """Asks the neural service for the policy and value of the round's position.

    Args:
        stub: a NeuralService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one call in seconds; the round's deadline shortens it.
        model: model name for 7x6 positions; empty means the service's default. Positions on
            another board name none: the service answers with its network of that board, or
            FAILED_PRECONDITION naming the board when it has none.
    """

    name = AgentName.NEURAL
    role = Role.PROPOSER
    repeatable = False

    def __init__(self, stub: neural_service_pb2_grpc.NeuralServiceStub, deadline_s: float,
                 model: str = "") -> None:
        self._stub = stub
        self._deadline_s = deadline_s
        self._model = model

    async def propose(self, round_: Round) -> Proposal:
        """The argmax of the policy over playable columns; confidence is its probability
        renormalized over the playable columns; `value` is the network's value.

        Raises:
            DeadlineExceeded: no time left, or the call ran past its deadline.
            FailedPrecondition: the neural service has no network of the position's board.
            Unavailable: the neural service is down, has no checkpoint, or answered malformed.
        """
        problem: ConnectFourProblem = round_.problem
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded("neural: no time left for an evaluation")
        board = problem.position.board
        request = neural_service_pb2.EvaluatePositionsRequest(
            model=self._model if board == STANDARD else "",
            positions=[position_message(problem.position)],
        )
        try:
            response = await self._stub.EvaluatePositions(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                # No network of the position's board: the request asks what the mesh does not
                # serve, not a dependency that failed (the message names the board).
                failure = FailedPrecondition(f"neural: {failure_detail(error)}")
                failure.failed_service = "neural"
                raise failure from error
            raise propagate(error, "neural") from error
        if len(response.evaluations) != 1 or len(response.evaluations[0].policy) != board.columns:
            raise Unavailable("neural answered with a malformed evaluation")
        evaluation = response.evaluations[0]
        legal = problem.legal_columns
        policy = {col: max(0.0, float(evaluation.policy[col])) for col in legal}
        total = sum(policy.values())
        # Highest probability; ties to the centre column (the usual Connect Four move order).
        col = max(legal, key=lambda c: (policy[c], -abs(2 * c + 1 - board.columns)))
        confidence = policy[col] / total if total > 0 else 1.0 / len(legal)
        model = response.model
        return Proposal(str(col + 1), confidence,
                        f"policy {confidence:.2f}, value {evaluation.value:+.2f} "
                        f"({model.name or 'default'} {model.version})".rstrip(),
                        value=max(-1.0, min(1.0, float(evaluation.value))),
                        detail=model.name)
