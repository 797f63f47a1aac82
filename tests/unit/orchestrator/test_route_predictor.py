"""The route predictors' calls (services/orchestrator/route_predictor.py): the meta-controller's and
the text router's calls get the same deadline (the predictor's, shortened to what the request has
left, none when nothing is left), and the servicer follows the text router it was given."""

from __future__ import annotations

import numpy as np
import pytest
from mesh.llm.v1 import llm_service_pb2
from mesh.neural.v1 import neural_service_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.routing.predictors import TextRoutePredictor
from services.orchestrator.routing.rules import CONNECT_FOUR_ROUTES, route_name
from services.orchestrator.routing.selection import AgentSet, Routers
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.reasoning import RoleServices

MODEL = neural_service_pb2.Model(name="router", version="1")


class RecordingNeural:
    """NeuralService's two router methods, recording each call's deadline; the text router
    answers `refine` with probability 0.9."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    async def PredictRoute(self, request, timeout=None):  # noqa: N802 - the gRPC method's name
        self.timeouts.append(timeout)
        share = 1 / len(CONNECT_FOUR_ROUTES)
        return neural_service_pb2.PredictRouteResponse(model=MODEL, routes=[
            neural_service_pb2.RouteProbability(route=route_name(route), probability=share)
            for route in CONNECT_FOUR_ROUTES])

    async def PredictTextRoute(self, request, timeout=None):  # noqa: N802
        self.timeouts.append(timeout)
        return neural_service_pb2.PredictTextRouteResponse(model=MODEL, routes=[
            neural_service_pb2.RouteProbability(route="draft", probability=0.1),
            neural_service_pb2.RouteProbability(route="refine", probability=0.9)])


async def predict(predictor: TextRoutePredictor, method: str, remaining_s: float | None):
    if method == "predict":
        return await predictor.predict([np.zeros(10, np.float32)], remaining_s)
    return await predictor.predict_text("how many?", remaining_s)


@pytest.mark.parametrize("method", ["predict", "predict_text"])
@pytest.mark.parametrize(("remaining_s", "timeout"), [(None, 2.0), (5.0, 2.0), (0.5, 0.5)])
async def test_a_call_gets_the_predictors_deadline_cut_to_the_requests(method, remaining_s,
                                                                      timeout):
    neural = RecordingNeural()
    predictor = TextRoutePredictor(neural, "router", 2.0)
    assert await predict(predictor, method, remaining_s) is not None
    assert neural.timeouts == [timeout]


@pytest.mark.parametrize("method", ["predict", "predict_text"])
@pytest.mark.parametrize("remaining_s", [0.0, -1.0])
async def test_with_no_time_left_there_is_no_call_and_no_prediction(method, remaining_s):
    neural = RecordingNeural()
    predictor = TextRoutePredictor(neural, "router", 2.0)
    assert await predict(predictor, method, remaining_s) is None
    assert neural.timeouts == []


class Gateway:
    """LlmService.Generate: a critique of "NO ISSUES" ends refine after its first round."""

    async def Generate(self, request, timeout=None):  # noqa: N802
        return llm_service_pb2.GenerateResponse(
            text="NO ISSUES. The answer is 108.", provider="openai", model="scripted",
            usage=llm_service_pb2.Usage(prompt_tokens=20, completion_tokens=10))


class Context:
    def time_remaining(self) -> float:
        return 30.0


async def no_passages(problem, timeout_s):
    return ()


async def test_the_servicer_asks_the_text_router_it_was_given_and_follows_it():
    neural = RecordingNeural()
    gateway = Gateway()
    settings = OrchestratorSettings(text_router_model="router", text_router_threshold=0.5,
                                    text_sample_count=1)
    servicer = OrchestratorServicer(
        settings, AgentSet(text=[LlmAgent(gateway, 5.0, 64)]),
        Routers(text_predictor=TextRoutePredictor(neural, "router", 2.0)),
        roles=RoleServices(llm=gateway, retrieve=no_passages))
    response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query="How many?"), Context())
    assert len(neural.timeouts) == 1
    assert response.role == pb.TEXT_ROLE_REFINE
    assert response.route_decider == pb.ROUTE_DECIDER_LEARNED
    assert response.route_confidence == pytest.approx(0.9)
