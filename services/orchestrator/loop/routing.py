"""The routing interface the loop calls: the ten routing features of the original framework's
meta-controller, computed from the loop's state, and the `Router` protocol that turns them into the
next agents (the policies themselves live in `services.orchestrator.routing`).

The features follow langgraph-multi-agent-mcts (`src/agents/meta_controller/utils.py`,
`normalize_features`), whose vector is [hrm_confidence, trm_confidence, mcts_value, consensus_score,
last_agent one-hot (hrm, trm, mcts), iteration, query_length, has_rag_context]. This mesh keeps the
order, the count and the [0, 1] range, and maps the original's three agents onto roles:

    original HRM slot -> the MODEL role:     the neural network (games), the LLM (text),
                                             HRM and TRM (Sudoku, mazes)
    original TRM slot -> the GROUNDING role: the exact checker (games, Sudoku, mazes),
                                             retrieval (text)
    original MCTS slot -> the SEARCH role:   the mcts service (games), the exact solver (Sudoku,
                                             mazes: a search that always finds the answer)

For puzzles the `mcts_value` feature stays at 0.5 (no search returns a value) and
`last_agent_mcts` marks the solver. `FEATURE_NAMES` gives the order.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.orchestrator.loop.types import AgentName, RoutingDecision


class Slot(enum.Enum):
    """The original framework's three agent slots, as roles of this mesh's agents."""

    MODEL = 0
    GROUNDING = 1
    SEARCH = 2


AGENT_SLOT: dict[AgentName, Slot] = {
    AgentName.NEURAL: Slot.MODEL,
    AgentName.LLM: Slot.MODEL,
    AgentName.HRM: Slot.MODEL,
    AgentName.TRM: Slot.MODEL,
    AgentName.CHECKER: Slot.GROUNDING,
    AgentName.RETRIEVAL: Slot.GROUNDING,
    AgentName.MCTS: Slot.SEARCH,
    AgentName.SOLVER: Slot.SEARCH,
}

FEATURE_NAMES: tuple[str, ...] = (
    "model_confidence",      # 0: newest confidence of the MODEL agent (original: hrm_confidence)
    "grounding_confidence",  # 1: same for the GROUNDING agent (original: trm_confidence)
    "mcts_value",            # 2: MCTS root value mapped from [-1, 1] to [0, 1]; 0.5 before search
    "consensus_score",        # 3: share of the weighted vote behind the leading answer
    "last_agent_model",       # 4: one-hot of the agents of the last round (several may be 1)
    "last_agent_grounding",   # 5
    "last_agent_mcts",        # 6
    "iteration_norm",         # 7: iteration / max_iterations
    "query_length_norm",      # 8: plies / 42 (Connect Four), characters / 10,000 (text),
                              #    blank share (Sudoku), cells / 40,000 (maze)
    "has_context",            # 9: 1 when retrieval supplied passages
)
NUM_FEATURES = len(FEATURE_NAMES)


@dataclass(frozen=True)
class RoutingState:
    """The loop's state as the router sees it.

    Attributes:
        confidences: newest vote confidence per agent, in [0, 1].
        mcts_value: root value of the newest search for the player to move, in [-1, 1]; None before
            any search.
        consensus_score: share of the weighted vote behind the leading answer, in [0, 1].
        last_agents: agents that voted in the last round (empty before the first round).
        iteration: 1-based iteration about to be routed.
        max_iterations: the iteration budget, >= 1.
        query_length_norm: size of the problem in [0, 1].
        has_context: retrieval supplied passages.
    """

    confidences: Mapping[AgentName, float]
    mcts_value: float | None
    consensus_score: float
    last_agents: Sequence[AgentName]
    iteration: int
    max_iterations: int
    query_length_norm: float
    has_context: bool


def _clip(x: float) -> float:
    return float(min(1.0, max(0.0, x)))


def routing_features(state: RoutingState) -> np.ndarray:
    """The feature vector of a routing state.

    Returns:
        float32 array [10] in the order of `FEATURE_NAMES`, every entry in [0, 1]. A slot's
        confidence is the largest newest confidence among the agents of that slot (0 when none
        voted).
    """
    slot_confidence = [0.0, 0.0, 0.0]
    for agent, confidence in state.confidences.items():
        slot = AGENT_SLOT[agent].value
        slot_confidence[slot] = max(slot_confidence[slot], _clip(confidence))
    last = [0.0, 0.0, 0.0]
    for agent in state.last_agents:
        last[AGENT_SLOT[agent].value] = 1.0
    mcts_value = 0.5 if state.mcts_value is None else _clip((state.mcts_value + 1.0) / 2.0)
    return np.array(
        [
            slot_confidence[Slot.MODEL.value],
            slot_confidence[Slot.GROUNDING.value],
            mcts_value,
            _clip(state.consensus_score),
            *last,
            _clip(state.iteration / max(1, state.max_iterations)),
            _clip(state.query_length_norm),
            1.0 if state.has_context else 0.0,
        ],
        dtype=np.float32,
    )



class Router(Protocol):
    """Chooses the next agents from the routing features.

    `candidates` are the agents that can still add information (proposers not yet run, and those
    whose answer changes with a larger budget). A router returns a subset of them, or none to stop.
    """

    def route(self, features: np.ndarray, candidates: Sequence[AgentName]) -> RoutingDecision:
        ...
