"""The MCTS agent: a client of mesh.mcts.v1.MctsService.Search (UCT with random rollouts).

Its confidence is the visit share of the best column; a later round searches again with more
simulations (the loop doubles them), so it is `repeatable`.
"""

from __future__ import annotations

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2, mcts_service_pb2_grpc

from libs.errors import DeadlineExceeded, Unavailable, propagate
from services.orchestrator.connect_four import ConnectFourProblem
from services.orchestrator.consensus import Proposal, Round
from services.orchestrator.routing import AgentName, Role


class MctsAgent:
    """Asks the mcts service for a search of the round's position.

    Args:
        stub: a MctsService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one Search call in seconds; the round's deadline shortens it.
    """

    name = AgentName.MCTS
    role = Role.PROPOSER
    repeatable = True

    def __init__(self, stub: mcts_service_pb2_grpc.MctsServiceStub, deadline_s: float) -> None:
        self._stub = stub
        self._deadline_s = deadline_s

    async def propose(self, round_: Round) -> Proposal:
        """The most visited column; `detail` is the search's `SearchStatistics` message.

        Raises:
            DeadlineExceeded: no time left, or the search ran past its deadline.
            Unavailable: the mcts service is down, failed, or proposed an unplayable column.
        """
        problem: ConnectFourProblem = round_.problem
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded("mcts: no time left for a search")
        request = mcts_service_pb2.SearchRequest(
            game=mcts_service_pb2.GAME_CONNECT_FOUR,
            connect_four=common_pb2.ConnectFourPosition(moves=problem.position.moves),
            simulations=round_.simulations,
            seed=round_.seed,
        )
        try:
            response = await self._stub.Search(request, timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise propagate(error, "mcts") from error
        answer = str(response.best_action)
        if answer not in problem.legal_answers():
            raise Unavailable(f"mcts proposed column {response.best_action}, which is not "
                              f"playable in {problem.position.moves!r}")
        statistics = response.statistics
        visits = {action.action: action.visits for action in statistics.actions}
        total = sum(visits.values())
        best = visits.get(response.best_action, 0)
        confidence = best / total if total > 0 else 0.0
        return Proposal(answer, confidence, f"visits {best}/{total}",
                        value=float(statistics.root_value), detail=statistics)
