"""Routing policies: the rule routers (Connect Four, puzzles, text), the Connect Four routes and
their names, and the learned router's wrapper.

`LearnedRouter` follows the neural service's meta-controller (a GRU over the ten routing features of
`services.orchestrator.loop.routing`, `PredictRoute`) for the first round of a Connect Four request
when its confidence clears a threshold, and the rules otherwise; every decision says which decided
(`RoutingDecision.decided_by`). `PuzzleRouter` is the rule router of Sudoku and mazes, whose
answers must pass the checker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from services.orchestrator.loop.routing import AGENT_SLOT, FEATURE_NAMES, NUM_FEATURES, Router, Slot
from services.orchestrator.loop.types import AgentName, Decider, RoutingDecision


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


R = TypeVar("R")


@dataclass(frozen=True)
class RoutePrediction(Generic[R]):
    """The meta-controller's answer for a routing state (routes are `Route`s), or the text
    router's for a query (routes are `text_roles.TextRole`s).

    Attributes:
        routes: the routes it chooses among, in the order of `probabilities`.
        probabilities: float [len(routes)], a distribution (softmax output).
        model: the served model's name and version ("router-connect4@1a2b3c4d5e6f").
    """

    routes: tuple[R, ...]
    probabilities: tuple[float, ...]
    model: str

    def best(self) -> tuple[R, float]:
        """The most probable route and its probability."""
        index = max(range(len(self.probabilities)), key=self.probabilities.__getitem__)
        return self.routes[index], self.probabilities[index]


class LearnedRouter:
    """The meta-controller's choice for the first round, the rules for the rest.

    The prediction is made once per request, before the loop, from the first round's features
    (they are known before any agent runs). In the first round the predicted route is followed
    when its probability is at least `threshold`, every agent of it is a candidate (a request
    that names its agents narrows the candidates) and, for a quick-checker route, a quick checker
    is available (`quick_checker`; the caller then runs the checker on the quick budget, see
    `choice`); otherwise, and in every later round, `fallback` decides. A None prediction (the
    neural service failed, or no router model is served) leaves every decision to `fallback`.

    The network's check. A followed route that runs the search without the network ends after
    one round (nothing disagrees with the search), so it drops the rules' safety net: when search
    and network disagree, the rules search again with twice the simulations. Where the route's
    probability is below `network_check_below`, the network joins the route's first round (it
    runs beside the search, one evaluation, and a later round continues the search rather than
    repeating it), so the rules' disagreement check stays where the model is less sure of its
    choice; at or above it the route runs as predicted.

    Args:
        prediction: the meta-controller's answer for the first round, or None.
        threshold: the smallest probability that is followed, in [0, 1].
        fallback: the rule router.
        quick_checker: the caller can run the checker on the quick budget.
        network_check_below: routes with the search and without the network, followed with a
            probability below this, run with the network too; in [0, 1] (0: never; 1: whenever
            the probability is below 1).
    """

    def __init__(self, prediction: RoutePrediction[Route] | None, threshold: float,
                 fallback: Router, quick_checker: bool = False,
                 network_check_below: float = 0.0) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if not 0.0 <= network_check_below <= 1.0:
            raise ValueError(f"network_check_below must be in [0, 1], got {network_check_below}")
        self._prediction = prediction
        self._threshold = threshold
        self._fallback = fallback
        self._quick_checker = quick_checker
        self._network_check_below = network_check_below

    def choice(self, candidates: Sequence[AgentName]) -> tuple[Route | None, str]:
        """The route followed in the first round given its `candidates` (None: the rules
        decide), with the network added where its check applies (see the class docstring), and
        why not when None ("" when there is no prediction)."""
        if self._prediction is None:
            return None, ""
        route, confidence = self._prediction.best()
        if confidence < self._threshold:
            return None, f"learned router {confidence:.2f} < threshold {self._threshold:.2f}"
        if not set(route.agents) <= set(candidates):
            return None, f"learned route {route.name} is not among the candidates"
        if route.quick_checker and not self._quick_checker:
            return None, f"learned route {route.name} needs a quick checker, which is not here"
        if (confidence < self._network_check_below and AgentName.MCTS in route.agents
                and AgentName.NEURAL not in route.agents and AgentName.NEURAL in candidates):
            route = Route((*route.agents, AgentName.NEURAL), route.quick_checker,
                          route.deep_search)
        return route, ""

    def route(self, features: np.ndarray, candidates: Sequence[AgentName]) -> RoutingDecision:
        """See the class docstring. `features` is float32 [10] in `FEATURE_NAMES` order."""
        decision = self._fallback.route(features, candidates)
        named = dict(zip(FEATURE_NAMES, features.tolist(), strict=True))
        first_round = named["last_agent_model"] + named["last_agent_grounding"] \
            + named["last_agent_mcts"] == 0.0
        if self._prediction is None or not first_round:
            return decision
        route, why_not = self.choice(candidates)
        confidence = self._prediction.best()[1]
        if route is None:
            return RoutingDecision(decision.agents, f"{decision.reason} ({why_not})",
                                   features, Decider.RULES, confidence)
        predicted = self._prediction.best()[0]
        check = (f", with the network's check (p < {self._network_check_below:.2f})"
                 if route != predicted else "")
        return RoutingDecision(route.agents, f"learned router: {predicted.name} "
                               f"(p={confidence:.2f}, {self._prediction.model}){check}",
                               features, Decider.LEARNED, confidence)


def choose_text_role(prediction: RoutePrediction[R], threshold: float,
                     available: Sequence[R]) -> tuple[R | None, float, str]:
    """The text router's role for a query when it is followed, else None (the rules decide);
    its probability; and why it is not followed ("" when it is).

    Followed when the most probable role's probability is at least `threshold` and the role can
    run here (it is in `available`: the roles need the gateway's roles configured, the search
    the mcts service).

    Raises:
        ValueError: `threshold` outside [0, 1].
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    role, confidence = prediction.best()
    if confidence < threshold:
        return None, confidence, (f"text router {confidence:.2f} < threshold "
                                  f"{threshold:.2f}")
    if role not in available:
        return None, confidence, f"text router chose {role}, which cannot run here"
    return role, confidence, ""
