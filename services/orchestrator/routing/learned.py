"""The learned router's wrapper: `LearnedRouter` follows the neural service's meta-controller (a GRU
over the ten routing features, `PredictRoute`) for the first round of a Connect Four request when
its confidence clears a threshold, and the rules otherwise; every decision says which decided
(`RoutingDecision.decided_by`). `choose_text_role` does the same for the text router's role.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from services.orchestrator.loop.routing import FEATURE_NAMES, Router
from services.orchestrator.loop.types import AgentName, Decider, RoutingDecision
from services.orchestrator.routing.rules import Route

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
