"""The ten routing features and the rule-based router."""

from __future__ import annotations

import numpy as np
import pytest

from services.orchestrator.loop.routing import FEATURE_NAMES, RoutingState, routing_features
from services.orchestrator.loop.types import AgentName
from services.orchestrator.routing.rules import RuleRouter

GAME_AGENTS = [AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL]


def state(**overrides) -> RoutingState:
    values = dict(confidences={}, mcts_value=None, consensus_score=0.0, last_agents=(),
                  iteration=1, max_iterations=4, query_length_norm=0.5, has_context=False)
    values.update(overrides)
    return RoutingState(**values)


def test_feature_vector_has_ten_named_float32_entries_in_order():
    features = routing_features(state(
        confidences={AgentName.NEURAL: 0.6, AgentName.CHECKER: 1.0, AgentName.MCTS: 0.3},
        mcts_value=-0.5, consensus_score=0.75, last_agents=(AgentName.MCTS,), iteration=2,
        has_context=True))
    assert len(FEATURE_NAMES) == 10
    assert features.dtype == np.float32 and features.shape == (10,)
    named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
    assert named["model_confidence"] == pytest.approx(0.6)
    assert named["grounding_confidence"] == 1.0
    assert named["mcts_value"] == pytest.approx(0.25)
    assert named["consensus_score"] == 0.75
    assert (named["last_agent_model"], named["last_agent_grounding"],
            named["last_agent_mcts"]) == (0.0, 0.0, 1.0)
    assert named["iteration_norm"] == 0.5
    assert named["query_length_norm"] == 0.5
    assert named["has_context"] == 1.0


def test_features_are_clipped_to_the_unit_interval():
    features = routing_features(state(confidences={AgentName.LLM: 3.0}, mcts_value=7.0,
                                      consensus_score=-1.0, iteration=9, max_iterations=3,
                                      query_length_norm=2.0))
    assert features.min() >= 0.0 and features.max() <= 1.0
    assert routing_features(state())[2] == 0.5  # no search yet: neutral value


def test_text_agents_fill_the_model_and_grounding_slots():
    features = routing_features(state(confidences={AgentName.LLM: 0.4,
                                                   AgentName.RETRIEVAL: 0.8},
                                      last_agents=(AgentName.LLM,)))
    assert features[0] == pytest.approx(0.4) and features[1] == pytest.approx(0.8)
    assert features[4] == 1.0


def test_first_round_runs_every_candidate():
    decision = RuleRouter().route(routing_features(state()), GAME_AGENTS)
    assert decision.agents == tuple(GAME_AGENTS)


def test_disagreement_routes_to_search_only():
    features = routing_features(state(confidences={AgentName.MCTS: 0.4, AgentName.NEURAL: 0.7},
                                      consensus_score=0.6,
                                      last_agents=(AgentName.MCTS, AgentName.NEURAL)))
    decision = RuleRouter().route(features, [AgentName.MCTS])
    assert decision.agents == (AgentName.MCTS,)


def test_certain_grounding_or_agreement_stops():
    router = RuleRouter()
    certain = routing_features(state(confidences={AgentName.CHECKER: 1.0},
                                     last_agents=(AgentName.CHECKER,), consensus_score=0.5))
    assert router.route(certain, [AgentName.MCTS]).agents == ()
    agreed = routing_features(state(confidences={AgentName.MCTS: 0.5}, consensus_score=1.0,
                                    last_agents=(AgentName.MCTS,)))
    assert router.route(agreed, [AgentName.MCTS]).agents == ()


def test_disagreement_without_a_search_agent_stops():
    features = routing_features(state(confidences={AgentName.NEURAL: 0.7}, consensus_score=0.5,
                                      last_agents=(AgentName.NEURAL,)))
    assert RuleRouter().route(features, []).agents == ()


def test_router_rejects_a_vector_of_the_wrong_shape():
    with pytest.raises(ValueError):
        RuleRouter().route(np.zeros(9, dtype=np.float32), GAME_AGENTS)
