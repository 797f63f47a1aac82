"""The maps between the proto's enums and the orchestrator's own names."""

from __future__ import annotations

from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.loop.types import AgentName
from services.orchestrator.problems.connect_four import Outcome

AGENT_TO_PROTO = {
    AgentName.MCTS: pb.AGENT_MCTS,
    AgentName.NEURAL: pb.AGENT_NEURAL,
    AgentName.CHECKER: pb.AGENT_CHECKER,
    AgentName.RETRIEVAL: pb.AGENT_RETRIEVAL,
    AgentName.LLM: pb.AGENT_LLM,
    AgentName.SOLVER: pb.AGENT_SOLVER,
    AgentName.HRM: pb.AGENT_HRM,
    AgentName.TRM: pb.AGENT_TRM,
}
PROTO_TO_AGENT = {value: key for key, value in AGENT_TO_PROTO.items()}
OUTCOME_TO_PROTO = {
    None: pb.OUTCOME_UNSPECIFIED,
    Outcome.WIN: pb.OUTCOME_WIN,
    Outcome.DRAW: pb.OUTCOME_DRAW,
    Outcome.LOSS: pb.OUTCOME_LOSS,
}


def decider_to_proto(decided_by: str) -> int:
    """The RouteDecider of "learned" or anything else (the rules)."""
    return pb.ROUTE_DECIDER_LEARNED if decided_by == "learned" else pb.ROUTE_DECIDER_RULES
