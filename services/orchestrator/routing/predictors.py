"""The clients of the neural service's meta-controller (`NeuralService.PredictRoute`) and of its
text router (`NeuralService.PredictTextRoute`).

A prediction that cannot be had (the neural service down or slow, no such model, a model that is
not a meta-controller, an answer naming agents this mesh does not have) is logged and returned as
None: the rules then decide, and the request never fails because of the router.
"""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from services.orchestrator.routing.learned import RoutePrediction
from services.orchestrator.routing.rules import Route, parse_route
from services.orchestrator.text.roles import TextRole

log = logging.getLogger(__name__)

WARN_EVERY_S = 30.0
"""A failing meta-controller is warned about at most this often (then at debug level)."""


class RoutePredictor:
    """Asks the neural service which agent set to run.

    Args:
        stub: a NeuralService stub.
        model: the meta-controller's model name ("router-connect4").
        deadline_s: deadline of one call in seconds.
    """

    def __init__(self, stub: neural_service_pb2_grpc.NeuralServiceStub, model: str,
                 deadline_s: float) -> None:
        self._stub = stub
        self._model = model
        self._deadline_s = deadline_s
        self._warned_at = -WARN_EVERY_S

    async def predict(self, steps: list[np.ndarray],
                      remaining_s: float | None = None) -> RoutePrediction[Route] | None:
        """The meta-controller's distribution over agent sets for the routing states `steps`
        (float32 [10] each, oldest first), or None when it cannot be had (logged).

        Args:
            steps: the routing-feature vectors so far.
            remaining_s: seconds left of the request; shortens the call's deadline.
        """
        timeout = self._timeout(remaining_s)
        if timeout is None:
            return None
        request = neural_service_pb2.PredictRouteRequest(
            model=self._model,
            steps=[neural_service_pb2.RoutingStep(features=step.tolist()) for step in steps])
        try:
            response = await self._stub.PredictRoute(request, timeout=timeout)
            routes = tuple(parse_route(entry.route) for entry in response.routes)
        except grpc.aio.AioRpcError as error:
            self._warn("PredictRoute on %s failed: %s: %s", self._model, error.code().name,
                       error.details())
            return None
        except ValueError as error:
            self._warn("meta-controller %s names an agent set this mesh does not know: %s",
                       self._model, error)
            return None
        if len(routes) < 2:
            self._warn("meta-controller %s answered %d agent sets", self._model, len(routes))
            return None
        return RoutePrediction(routes, tuple(entry.probability for entry in response.routes),
                               f"{response.model.name}@{response.model.version}")

    def _timeout(self, remaining_s: float | None) -> float | None:
        """Deadline of one call in seconds: `deadline_s`, shortened to `remaining_s` (the
        request's seconds left, None: no limit); None when nothing is left to call with."""
        timeout = self._deadline_s if remaining_s is None else min(self._deadline_s, remaining_s)
        return timeout if timeout > 0 else None

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        level = logging.WARNING if now - self._warned_at >= WARN_EVERY_S else logging.DEBUG
        if level == logging.WARNING:
            self._warned_at = now
        log.log(level, message + "; the rules decide", *args)


class TextRoutePredictor(RoutePredictor):
    """Asks the neural service which text role should answer a query.

    Args:
        stub: a NeuralService stub.
        model: the text router's model name ("router-text").
        deadline_s: deadline of one call in seconds.
    """

    async def predict_text(self, query: str,
                           remaining_s: float | None = None) -> RoutePrediction[TextRole] | None:
        """The text router's distribution over text roles for `query`, or None when it cannot be
        had (logged): the neural service failed or was too slow, the model is not a text
        router, or it names a role this orchestrator does not know or fewer than two.

        Args:
            query: the query's text.
            remaining_s: seconds left of the request; shortens the call's deadline.
        """
        timeout = self._timeout(remaining_s)
        if timeout is None:
            return None
        request = neural_service_pb2.PredictTextRouteRequest(model=self._model, query=query)
        try:
            response = await self._stub.PredictTextRoute(request, timeout=timeout)
            roles = tuple(TextRole(entry.route) for entry in response.routes)
        except grpc.aio.AioRpcError as error:
            self._warn("PredictTextRoute on %s failed: %s: %s", self._model, error.code().name,
                       error.details())
            return None
        except ValueError as error:
            self._warn("text router %s names a role this orchestrator does not know: %s",
                       self._model, error)
            return None
        if len(roles) < 2:
            self._warn("text router %s answered %d roles", self._model, len(roles))
            return None
        return RoutePrediction(roles, tuple(entry.probability for entry in response.routes),
                               f"{response.model.name}@{response.model.version}")
