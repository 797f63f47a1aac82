"""An enum field holding a value that is not one of its enum's (a gRPC caller sends numbers) is
INVALID_ARGUMENT naming the field and listing the values it takes."""

from __future__ import annotations

import pytest
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as mcts_pb
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.errors import InvalidArgument
from services.mcts.api.requests import parse_search
from services.mcts.settings import MctsSettings
from services.orchestrator.api.requests import parse_query, validate_agents
from services.orchestrator.settings import OrchestratorSettings


def test_an_unknown_agent_lists_the_agents_that_apply():
    with pytest.raises(InvalidArgument) as caught:
        validate_agents([pb.AGENT_MCTS, 99], ["mcts", "checker"])
    assert caught.value.field == "agents"
    assert "agents[1] is 99" in caught.value.description
    assert "AGENT_MCTS, AGENT_CHECKER" in caught.value.description


@pytest.mark.parametrize("field, enum", [("search_mode", common_pb2.SearchMode),
                                         ("fusion", common_pb2.FusionMethod)])
def test_an_unknown_search_mode_or_fusion_lists_the_values(field, enum):
    request = pb.AnswerQueryRequest(query="q", **{field: 42})
    with pytest.raises(InvalidArgument) as caught:
        parse_query(request, OrchestratorSettings(port=0, rest_port=-1))
    assert caught.value.field == field
    assert all(name in caught.value.description for name in enum.keys())


@pytest.mark.parametrize("field, enum", [("rule", mcts_pb.SelectionRule),
                                         ("evaluator", mcts_pb.LeafEvaluator),
                                         ("parallelism", mcts_pb.Parallelism)])
def test_an_unknown_search_option_lists_the_values(field, enum):
    request = mcts_pb.SearchRequest(game=mcts_pb.GAME_CONNECT_FOUR, **{field: 42})
    with pytest.raises(InvalidArgument) as caught:
        parse_search(request, MctsSettings(port=0))
    assert caught.value.field == field
    assert all(name in caught.value.description for name in enum.keys())
