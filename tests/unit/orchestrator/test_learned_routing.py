"""The learned router: followed above its threshold in the first round, rules otherwise, and the
response says which decided; the routing log is written and bounded; a failing meta-controller
leaves the rules in charge."""

from __future__ import annotations

import json
import time

import grpc
import numpy as np
import pytest
from mesh.common.v1 import common_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.loop.routing import RoutingState, routing_features
from services.orchestrator.loop.types import AgentName, Decider, Proposal, Role, Round
from services.orchestrator.routing import log as routing_log_module
from services.orchestrator.routing.learned import LearnedRouter, RoutePrediction
from services.orchestrator.routing.log import RoutingLog
from services.orchestrator.routing.predictors import RoutePredictor
from services.orchestrator.routing.rules import (
    CONNECT_FOUR_ROUTES,
    Route,
    RuleRouter,
    parse_route,
    route_name,
)
from services.orchestrator.routing.selection import AgentSet, Routers
from services.orchestrator.settings import OrchestratorSettings

ALL = (AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL)


def first_round(plies: int = 10) -> np.ndarray:
    return routing_features(RoutingState({}, None, 0.0, (), 1, 3, plies / 42, False))


def prediction(best: int, p: float) -> RoutePrediction:
    rest = (1.0 - p) / (len(CONNECT_FOUR_ROUTES) - 1)
    return RoutePrediction(CONNECT_FOUR_ROUTES,
                           tuple(p if i == best else rest for i in range(len(CONNECT_FOUR_ROUTES))),
                           "router-connect4@abc")


def test_route_names_round_trip():
    for route in CONNECT_FOUR_ROUTES:
        assert parse_route(route_name(route)) == route
    assert route_name(CONNECT_FOUR_ROUTES[1]) == "checker+neural"
    assert parse_route("checker@quick+mcts+neural") == Route(ALL, quick_checker=True)
    assert route_name(Route((AgentName.CHECKER, AgentName.NEURAL), True)) == \
        "checker@quick+neural"
    assert parse_route("mcts@deep") == Route((AgentName.MCTS,), deep_search=True)
    assert route_name(Route((AgentName.CHECKER, AgentName.MCTS), True, True)) == \
        "checker@quick+mcts@deep"
    for bad in ("checker+oracle", "mcts@quick", "checker@slow", "neural@deep", "neural+neural",
                ""):
        with pytest.raises(ValueError):
            parse_route(bad)


def test_learned_route_is_followed_above_the_threshold():
    router = LearnedRouter(prediction(3, 0.9), 0.6, RuleRouter())
    decision = router.route(first_round(), ALL)
    assert decision.agents == (AgentName.NEURAL,)
    assert decision.decided_by is Decider.LEARNED
    assert decision.confidence == pytest.approx(0.9)


def test_below_the_threshold_the_rules_decide_and_say_so():
    router = LearnedRouter(prediction(3, 0.55), 0.6, RuleRouter())
    decision = router.route(first_round(), ALL)
    assert decision.agents == ALL  # the rules: every agent in the first round
    assert decision.decided_by is Decider.RULES
    assert decision.confidence == pytest.approx(0.55)
    assert "threshold" in decision.reason


def test_no_prediction_and_later_rounds_are_the_rules():
    assert LearnedRouter(None, 0.6, RuleRouter()).route(first_round(), ALL).decided_by \
        is Decider.RULES
    later = routing_features(RoutingState({AgentName.MCTS: 0.4, AgentName.NEURAL: 0.6}, 0.1, 0.5,
                                          (AgentName.MCTS, AgentName.NEURAL), 2, 3, 0.2, False))
    decision = LearnedRouter(prediction(3, 0.99), 0.6, RuleRouter()).route(later,
                                                                           [AgentName.MCTS])
    assert decision.decided_by is Decider.RULES
    assert decision.agents == (AgentName.MCTS,)


def test_a_learned_route_outside_the_requested_agents_falls_back():
    router = LearnedRouter(prediction(1, 0.95), 0.6, RuleRouter())  # checker+neural
    decision = router.route(first_round(), [AgentName.MCTS])
    assert decision.agents == (AgentName.MCTS,)
    assert decision.decided_by is Decider.RULES


SEARCH_ALONE = CONNECT_FOUR_ROUTES.index(parse_route("mcts"))
CHECKER_AND_SEARCH = CONNECT_FOUR_ROUTES.index(parse_route("checker+mcts"))


def test_a_search_route_below_the_network_check_runs_with_the_network():
    router = LearnedRouter(prediction(CHECKER_AND_SEARCH, 0.96), 0.6, RuleRouter(),
                           network_check_below=0.99)
    decision = router.route(first_round(5), ALL)
    assert decision.agents == ALL
    assert decision.decided_by is Decider.LEARNED
    assert "checker+mcts" in decision.reason and "network's check" in decision.reason
    assert router.choice(ALL)[0] == Route(ALL)


def test_the_network_check_leaves_sure_routes_and_routes_without_the_search_alone():
    sure = LearnedRouter(prediction(SEARCH_ALONE, 0.995), 0.6, RuleRouter(),
                         network_check_below=0.99)
    assert sure.route(first_round(12), ALL).agents == (AgentName.MCTS,)
    no_search = LearnedRouter(prediction(1, 0.9), 0.6, RuleRouter(),  # checker+neural
                              network_check_below=0.99)
    assert no_search.route(first_round(), ALL).agents == (AgentName.CHECKER, AgentName.NEURAL)
    off = LearnedRouter(prediction(SEARCH_ALONE, 0.9), 0.6, RuleRouter())
    assert off.route(first_round(), ALL).agents == (AgentName.MCTS,)
    # A request that leaves the network out keeps the route as predicted.
    narrowed = LearnedRouter(prediction(SEARCH_ALONE, 0.9), 0.6, RuleRouter(),
                             network_check_below=0.99)
    assert narrowed.route(first_round(), [AgentName.CHECKER, AgentName.MCTS]).agents == \
        (AgentName.MCTS,)
    with pytest.raises(ValueError, match="network_check_below"):
        LearnedRouter(None, 0.6, RuleRouter(), network_check_below=1.5)
    with pytest.raises(ValueError, match="router_network_check_below"):
        OrchestratorSettings(router_network_check_below=-0.1)


class Fixed:
    def __init__(self, name: AgentName, answer: str) -> None:
        self.name = name
        self.role = Role.PROPOSER
        self.repeatable = False
        self.answer = answer
        self.calls = 0

    async def propose(self, round_: Round) -> Proposal:
        self.calls += 1
        self.simulations = round_.simulations
        return Proposal(self.answer, 0.7, "fixed", value=0.0)


class FakePredictor:
    def __init__(self, result: RoutePrediction | None) -> None:
        self.result = result
        self.steps = None

    async def predict(self, steps, remaining_s=None):
        self.steps = steps
        return self.result


class Context:
    def time_remaining(self) -> float:
        return 30.0


def servicer(threshold: float, predictor, log: RoutingLog | None = None,
             quick: Fixed | None = None, network_check_below: float = 0.0,
             answers: dict[AgentName, str] | None = None):
    agents = {name: Fixed(name, (answers or {}).get(name, "4")) for name in ALL}
    agents[AgentName.MCTS].repeatable = True  # a larger budget can change the search's answer
    settings = OrchestratorSettings(router_threshold=threshold,
                                    router_network_check_below=network_check_below)
    front = OrchestratorServicer(settings, AgentSet(list(agents.values()), quick_checker=quick),
                                 Routers(predictor=predictor), routing_log=log)
    return front, agents


REQUEST = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                 thread_id="t-1")


async def test_the_servicer_follows_the_meta_controller_above_the_threshold():
    predictor = FakePredictor(prediction(3, 0.9))  # the network alone
    front, agents = servicer(0.6, predictor)
    response = await front.SolveProblem(REQUEST, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_LEARNED
    assert response.route_confidence == pytest.approx(0.9)
    assert [agent.calls for agent in agents.values()] == [0, 0, 1]
    assert response.agents == [pb.AGENT_NEURAL]
    # The first round's features: iteration 1 of 3, 4 plies of 42, nothing voted yet.
    assert predictor.steps[0][7] == pytest.approx(1 / 3)
    assert predictor.steps[0][8] == pytest.approx(4 / 42)


async def test_a_quick_checker_route_runs_the_quick_checker_instead_of_the_checker():
    quick = Fixed(AgentName.CHECKER, "4")
    front, agents = servicer(0.6, FakePredictor(prediction(5, 0.9)), quick=quick)
    response = await front.SolveProblem(REQUEST, Context())  # checker@quick+neural
    assert response.route_decider == pb.ROUTE_DECIDER_LEARNED
    assert quick.calls == 1
    assert [agent.calls for agent in agents.values()] == [0, 0, 1]
    assert list(response.agents) == [pb.AGENT_CHECKER, pb.AGENT_NEURAL]


async def test_a_deep_search_route_runs_the_search_alone_with_four_times_the_simulations():
    deep = CONNECT_FOUR_ROUTES.index(parse_route("mcts@deep"))
    front, agents = servicer(0.6, FakePredictor(prediction(deep, 0.9)))
    request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                     simulations=3000)
    response = await front.SolveProblem(request, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_LEARNED
    assert [agent.calls for agent in agents.values()] == [0, 1, 0]
    assert agents[AgentName.MCTS].simulations == 12_000


async def test_below_the_network_check_the_search_continues_while_the_network_disagrees():
    predictor = FakePredictor(prediction(SEARCH_ALONE, 0.9))
    front, agents = servicer(0.6, predictor, network_check_below=0.99,
                             answers={AgentName.NEURAL: "3"})
    request = pb.SolveProblemRequest(connect_four=common_pb2.ConnectFourPosition(moves="4453"),
                                     simulations=1000)
    response = await front.SolveProblem(request, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_LEARNED
    # Round 1: the search and the network; they disagree, so the rules search again, twice.
    assert [agent.calls for agent in agents.values()] == [0, 3, 1]
    assert agents[AgentName.MCTS].simulations == 4000
    front, agents = servicer(0.6, FakePredictor(prediction(SEARCH_ALONE, 0.9)),
                             answers={AgentName.NEURAL: "3"})  # no check: one search
    await front.SolveProblem(request, Context())
    assert [agent.calls for agent in agents.values()] == [0, 1, 0]


async def test_a_quick_checker_route_without_a_quick_checker_is_left_to_the_rules():
    front, agents = servicer(0.6, FakePredictor(prediction(4, 0.9)))  # no quick checker here
    response = await front.SolveProblem(REQUEST, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert [agent.calls for agent in agents.values()] == [1, 1, 1]


async def test_the_servicer_falls_back_to_the_rules_below_the_threshold():
    front, agents = servicer(0.95, FakePredictor(prediction(3, 0.9)))
    response = await front.SolveProblem(REQUEST, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert response.route_confidence == pytest.approx(0.9)
    assert [agent.calls for agent in agents.values()] == [1, 1, 1]


async def test_without_a_router_model_the_rules_decide():
    front, agents = servicer(0.6, None)
    response = await front.SolveProblem(REQUEST, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert response.route_confidence == 0.0


async def test_every_request_is_logged_with_its_routes_and_outcome(tmp_path):
    log = RoutingLog(tmp_path / "routing.jsonl", max_bytes=1 << 20, backups=1)
    front, _ = servicer(0.6, FakePredictor(prediction(1, 0.8)), log)
    await front.SolveProblem(REQUEST, Context())
    log.close()
    [line] = (tmp_path / "routing.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["kind"] == "connect_four" and record["query"] == "4453"
    assert record["thread_id"] == "t-1"
    assert record["routes"][0]["agents"] == ["checker", "neural"]
    assert record["routes"][0]["decided_by"] == "learned"
    assert len(record["routes"][0]["features"]) == 10
    assert {vote["agent"] for vote in record["votes"]} == {"checker", "neural"}
    assert record["answer"] == "4" and record["latency_ms"] > 0


def test_the_routing_log_is_bounded_and_rotated(tmp_path):
    path = tmp_path / "routing.jsonl"
    log = RoutingLog(path, max_bytes=2048, backups=2)
    for index in range(200):
        log.write({"index": index, "padding": "x" * 100})
    log.close()
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["routing.jsonl", "routing.jsonl.1", "routing.jsonl.2"]
    assert all(f.stat().st_size <= 2048 for f in files)
    last = json.loads(path.read_text().splitlines()[-1])
    assert last["index"] == 199  # the newest line is in the current file


def test_a_full_queue_drops_lines_instead_of_blocking(tmp_path, monkeypatch):
    monkeypatch.setattr(routing_log_module, "QUEUE_SIZE", 3)
    log = RoutingLog(tmp_path / "routing.jsonl", max_bytes=1 << 20, backups=1)
    log._listener.stop()  # nothing drains the queue now
    started = time.perf_counter()
    for index in range(5):
        log.write({"index": index})
    assert time.perf_counter() - started < 1.0
    assert log.dropped == 2
    log._listener.start()
    log.close()
    assert len((tmp_path / "routing.jsonl").read_text().splitlines()) == 3


def test_the_routing_log_refuses_a_bound_too_small(tmp_path):
    with pytest.raises(ValueError, match="max_bytes"):
        RoutingLog(tmp_path / "r.jsonl", max_bytes=10, backups=1)


class FailingStub:
    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code

    async def PredictRoute(self, request, timeout):
        raise grpc.aio.AioRpcError(self.code, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                   "the checkpoint is corrupt")


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND,
                                  grpc.StatusCode.FAILED_PRECONDITION])
async def test_a_failing_meta_controller_gives_no_prediction(code):
    predictor = RoutePredictor(FailingStub(code), "router-connect4", 0.2)
    assert await predictor.predict([first_round()]) is None


async def test_the_servicer_stays_on_the_rules_when_the_meta_controller_fails():
    predictor = RoutePredictor(FailingStub(grpc.StatusCode.UNAVAILABLE), "router-connect4", 0.2)
    front, agents = servicer(0.6, predictor)
    response = await front.SolveProblem(REQUEST, Context())
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert [agent.calls for agent in agents.values()] == [1, 1, 1]
