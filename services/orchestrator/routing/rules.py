"""Routing policies: the rule routers (Connect Four, puzzles, text), the Connect Four routes and
their names. `PuzzleRouter` is the rule router of Sudoku and mazes, whose answers must pass the
checker; the learned router's wrapper is in `services.orchestrator.routing.learned`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.orchestrator.loop.routing import AGENT_SLOT, FEATURE_NAMES, NUM_FEATURES, Slot
from services.orchestrator.loop.types import AgentName, RoutingDecision


class RuleRouter:
    """Rules over the routing features.

    1. First round (no agent has voted: the last-agent one-hot is all zero): every candidate, so the
       agents reach their answers independently and concurrently.
    2. The grounding agent is certain (`grounding_confidence` = 1: the checker proved the answer):
       none.
    3. The agents agree (`consensus_score` = 1): none.
    4. Otherwise the search agents among the candidates, which a larger simulation budget can move;
       none when there are none (nothing new can be learned).
    """

    def route(self, features: np.ndarray, candidates: Sequence[AgentName]) -> RoutingDecision:
        """See the class docstring. `features` is float32 [10] in `FEATURE_NAMES` order."""
        if features.shape != (NUM_FEATURES,):
            raise ValueError(f"features must have shape ({NUM_FEATURES},), got {features.shape}")
        named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
        first_round = named["last_agent_model"] + named["last_agent_grounding"] \
            + named["last_agent_mcts"] == 0.0
        if first_round:
            return RoutingDecision(tuple(candidates), "first round: every agent", features)
        if named["grounding_confidence"] >= 1.0:
            return RoutingDecision((), "the grounding agent is certain", features)
        if named["consensus_score"] >= 1.0:
            return RoutingDecision((), "the agents agree", features)
        search = tuple(name for name in candidates if AGENT_SLOT[name] is Slot.SEARCH)
        if search:
            return RoutingDecision(search, "disagreement: search again with more simulations",
                                   features)
        return RoutingDecision((), "disagreement, and no agent can change its answer", features)


class PuzzleRouter:
    """Rules for problems whose answer the exact checker verifies (Sudoku, mazes).

    Agreement is not enough here: only the checker's acceptance (`grounding_confidence` = 1) ends
    the loop, and an answer it rejected is never counted.

    1. The grounding agent is certain (the checker accepted an answer): none.
    2. First round: the MODEL-slot candidates (HRM, TRM: cheap learned proposals) when there are
       any, else the SEARCH-slot ones (the exact solver).
    3. Otherwise (the proposals failed or were rejected): the SEARCH-slot candidates, so the exact
       solver answers when the proposals fail; none when there are none.
    """

    def route(self, features: np.ndarray, candidates: Sequence[AgentName]) -> RoutingDecision:
        """See the class docstring. `features` is float32 [10] in `FEATURE_NAMES` order."""
        if features.shape != (NUM_FEATURES,):
            raise ValueError(f"features must have shape ({NUM_FEATURES},), got {features.shape}")
        named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
        if named["grounding_confidence"] >= 1.0:
            return RoutingDecision((), "the checker accepted an answer", features)
        search = tuple(name for name in candidates if AGENT_SLOT[name] is Slot.SEARCH)
        first_round = named["last_agent_model"] + named["last_agent_grounding"] \
            + named["last_agent_mcts"] == 0.0
        if first_round:
            models = tuple(name for name in candidates if AGENT_SLOT[name] is Slot.MODEL)
            if models:
                return RoutingDecision(models, "first round: the learned models propose",
                                       features)
            return RoutingDecision(search, "first round: the exact solver", features)
        if search:
            return RoutingDecision(search, "no verified answer: the exact solver answers",
                                   features)
        return RoutingDecision((), "no verified answer, and no agent left to ask", features)


class TextRouter:
    """Rules for a text query (retrieval as context, the LLM as proposer).

    1. First round: every candidate.
    2. Otherwise the MODEL-slot candidates: the LLM is a candidate again only while its
       self-consistency vote is below the agreement threshold and the budgets allow another draft
       (`LlmAgent.repeatable`), so it samples more; none when there are none.
    """

    def route(self, features: np.ndarray, candidates: Sequence[AgentName]) -> RoutingDecision:
        """See the class docstring. `features` is float32 [10] in `FEATURE_NAMES` order."""
        if features.shape != (NUM_FEATURES,):
            raise ValueError(f"features must have shape ({NUM_FEATURES},), got {features.shape}")
        named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
        first_round = named["last_agent_model"] + named["last_agent_grounding"] \
            + named["last_agent_mcts"] == 0.0
        if first_round:
            return RoutingDecision(tuple(candidates), "first round: every agent", features)
        models = tuple(name for name in candidates if AGENT_SLOT[name] is Slot.MODEL)
        if models:
            return RoutingDecision(models, "drafts below the agreement threshold: sample more",
                                   features)
        return RoutingDecision((), "no agent can add drafts", features)


QUICK = "quick"
"""The route-name variant of the checker that solves on the quick budget: "checker@quick"."""
DEEP = "deep"
"""The route-name variant of the search that runs `DEEP_SEARCH_FACTOR` times the request's
simulations in its first round: "mcts@deep"."""
DEEP_SEARCH_FACTOR = 4
"""The first round's simulations of a deep search, as a multiple of the request's (the default
20,000 becomes 80,000: what the rules reach in their third round when search and network keep
disagreeing, in one search instead of three)."""
QUICK_CHECKER_MAX_NODES = 131_072
"""Negamax nodes at most of the quick checker (the checker's own budget capped at this): about
10-40 ms of one core. On the train split of Pons' files it finishes about half the positions with
12-15 moves played (the full budget, 2,000,000 nodes, nearly all, at 100-300 ms), and from 16 moves
on nearly every one, so it keeps the checker's exact answers where they are cheap and gives up
quickly where they are not."""


@dataclass(frozen=True)
class Route:
    """A first-round choice of the meta-controller: an agent set, whether its checker solves
    on the quick budget (`QUICK_CHECKER_MAX_NODES`) instead of the full one, and whether its
    search runs `DEEP_SEARCH_FACTOR` times the request's simulations.

    Its name, as the router's model and the labelled workload write it, joins the agents with
    "+", the quick checker written "checker@quick", the deep search "mcts@deep":
    "checker@quick+mcts+neural".
    """

    agents: tuple[AgentName, ...]
    quick_checker: bool = False
    deep_search: bool = False

    def __post_init__(self) -> None:
        if not self.agents:
            raise ValueError("a route names at least one agent")
        if self.quick_checker and AgentName.CHECKER not in self.agents:
            raise ValueError("a quick checker needs the checker among the agents")
        if self.deep_search and AgentName.MCTS not in self.agents:
            raise ValueError("a deep search needs the search among the agents")

    @property
    def name(self) -> str:
        """"checker+mcts+neural", "checker@quick+neural", "mcts@deep", ..."""
        parts = []
        for agent in self.agents:
            if agent is AgentName.CHECKER and self.quick_checker:
                parts.append(f"{agent}@{QUICK}")
            elif agent is AgentName.MCTS and self.deep_search:
                parts.append(f"{agent}@{DEEP}")
            else:
                parts.append(str(agent))
        return "+".join(parts)


CONNECT_FOUR_ROUTES: tuple[Route, ...] = (
    Route((AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL)),
    Route((AgentName.CHECKER, AgentName.NEURAL)),
    Route((AgentName.MCTS, AgentName.NEURAL)),
    Route((AgentName.NEURAL,)),
    Route((AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL), quick_checker=True),
    Route((AgentName.CHECKER, AgentName.NEURAL), quick_checker=True),
    Route((AgentName.MCTS,)),
    Route((AgentName.CHECKER, AgentName.MCTS)),
    Route((AgentName.CHECKER, AgentName.MCTS), quick_checker=True),
    Route((AgentName.MCTS,), deep_search=True),
)
"""The first-round choices the Connect Four meta-controller chooses among, in the order of its
output units: every agent (what the rules run), the exact checker with the network (the checker's
tactics and its solver, within `checker_early_nodes` below `checker_min_moves` moves; the
network's move when the checker abstains), the search with the network (no exact solving), the
network alone, the first two with the quick checker (its solver stopped at
`QUICK_CHECKER_MAX_NODES`), the search alone, the checker (full, then quick) with the search, and
the search alone with `DEEP_SEARCH_FACTOR` times the simulations. A set without the network has no
second opinion to disagree with the search, so the loop ends after one round: one search of the
default simulations, where the rules' disagreement between search and network doubles them twice."""


def route_name(route: Route | Sequence[AgentName]) -> str:
    """The name of a route (or a plain agent set) as the router's model and log write it:
    "checker+mcts+neural", "checker@quick+neural"."""
    return route.name if isinstance(route, Route) else Route(tuple(route)).name


def parse_route(name: str) -> Route:
    """The route of a route name ("checker+neural", "checker@quick+mcts+neural", "mcts@deep").

    Raises:
        ValueError: an unknown agent or variant, an agent named twice, or an empty name.
    """
    if not name:
        raise ValueError("empty route name")
    agents: list[AgentName] = []
    quick = deep = False
    for part in name.split("+"):
        agent_name, _, variant = part.partition("@")
        agent = AgentName(agent_name)
        if variant:
            if agent is AgentName.CHECKER and variant == QUICK:
                quick = True
            elif agent is AgentName.MCTS and variant == DEEP:
                deep = True
            else:
                raise ValueError(f"unknown variant {part!r} (only checker@{QUICK} and "
                                 f"mcts@{DEEP})")
        agents.append(agent)
    if len(set(agents)) != len(agents):
        raise ValueError(f"{name!r} names an agent twice")
    return Route(tuple(agents), quick, deep)
