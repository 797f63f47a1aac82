"""The meta-controller end to end: `train router` on a tiny routing log writes a checkpoint that the
neural service loads and serves through PredictRoute, and the orchestrator's RoutePredictor reads;
bad input is INVALID_ARGUMENT naming the field; a corrupt checkpoint is refused with a clear error
while the service keeps serving."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import grpc
import pytest
import torch
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc

from libs.server import start_server
from services.neural.checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from services.neural.evaluator import PositionEvaluator
from services.neural.main import build_servicers
from services.neural.models.connect4_pv import ARCHITECTURE, Connect4PV, Connect4PVConfig
from services.neural.settings import NeuralSettings
from services.orchestrator.loop.routing import RoutingState, routing_features
from services.orchestrator.loop.types import AgentName
from services.orchestrator.routing.predictors import RoutePredictor
from services.orchestrator.routing.rules import Route
from training.router.connect4 import ROUTES, RouterConfig, load_examples, train_router

TIMEOUT_S = 10


def features(plies: int) -> list[float]:
    return routing_features(RoutingState({}, None, 0.0, (), 1, 3, plies / 42, False)).tolist()


def write_tiny_log(directory):
    """Late positions (30+ plies): the checker with the network keeps the outcome as every agent
    does, five times faster; early ones (2-6 plies): only every agent keeps it."""
    log, labels = [], []
    for index, plies in enumerate([2, 3, 4, 5, 6, 30, 32, 34, 36, 38]):
        query = f"q{index}"
        late = plies >= 30
        for route, kept, ms in (("checker+mcts+neural", True, 50.0),
                                ("checker+neural", late, 10.0)):
            thread = f"{index}-{route}"
            log.append({"kind": "connect_four", "query": query, "thread_id": thread,
                        "routes": [{"iteration": 1, "features": features(plies),
                                    "agents": route.split("+"), "decided_by": "rules"}],
                        "latency_ms": ms})
            labels.append({"thread_id": thread, "kept": kept})
    log.append({"kind": "text", "query": "what?", "thread_id": "x", "routes": []})
    (directory / "routing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    (directory / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    return directory / "routing.jsonl", directory / "labels.jsonl"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A models folder with a router trained on the tiny log and a tiny policy/value network."""
    directory = tmp_path_factory.mktemp("router")
    log, labels = write_tiny_log(directory)
    models = directory / "models"
    report = train_router(RouterConfig(models / "router-connect4", [log], [labels]))
    assert report["examples"] == 10
    assert report["targets"]["checker+neural"] == 5
    assert report["choices"] == {"checker+mcts+neural": 5, "checker+neural": 5,
                                 "mcts+neural": 0, "neural": 0, "checker@quick+mcts+neural": 0,
                                 "checker@quick+neural": 0, "mcts": 0, "checker+mcts": 0,
                                 "checker@quick+mcts": 0, "mcts@deep": 0}
    torch.manual_seed(3)
    save_checkpoint(models / "connect4-pv",
                    Connect4PV(Connect4PVConfig(channels=8, blocks=1, value_hidden=16)).eval(),
                    ARCHITECTURE, {})
    return models


@pytest.fixture
def models_dir(trained, tmp_path):
    """A copy of the trained models folder that a test may damage."""
    return Path(shutil.copytree(trained, tmp_path / "models"))


@pytest.fixture
async def serve():
    running = []

    async def start(models_dir):
        settings = NeuralSettings(port=0, models_dir=models_dir, device="cpu")
        evaluator = PositionEvaluator(settings.default_model, settings.max_batch,
                                      settings.max_wait_ms)
        servicers, ready = await build_servicers(settings, evaluator)
        server = await start_server("neural", settings, servicers, ready)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
        running.append((server, channel, evaluator))
        return neural_service_pb2_grpc.NeuralServiceStub(channel)

    yield start
    for server, channel, evaluator in running:
        await channel.close()
        await server.stop(0)
        await evaluator.close()


def _field(error: grpc.aio.AioRpcError) -> str:
    for detail in rpc_status.from_call(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError("no BadRequest detail")


def test_training_reads_only_labelled_connect_four_records(tmp_path):
    log, labels = write_tiny_log(tmp_path)
    examples = load_examples([log], [labels])
    assert len(examples) == 10
    assert all(set(e.outcomes) == {"checker+mcts+neural", "checker+neural"} for e in examples)
    assert examples[0].target(0.05) == ROUTES.index("checker+mcts+neural")
    assert examples[-1].target(0.05) == ROUTES.index("checker+neural")


def test_the_label_names_the_route_a_request_was_sent_on(tmp_path):
    """The log names agents only (a quick checker is logged as "checker"); the label's route
    decides which output unit the outcome belongs to."""
    row = {"kind": "connect_four", "query": "44", "thread_id": "t", "latency_ms": 12.0,
           "routes": [{"iteration": 1, "features": features(2),
                       "agents": ["checker", "neural"], "decided_by": "rules"}]}
    (tmp_path / "routing.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "labels.jsonl").write_text(json.dumps(
        {"thread_id": "t", "kept": True, "route": "checker@quick+neural"}) + "\n")
    [example] = load_examples([tmp_path / "routing.jsonl"], [tmp_path / "labels.jsonl"])
    assert example.outcomes == {"checker@quick+neural": [(True, 12.0)]}


def test_a_malformed_log_line_is_a_clear_error(tmp_path):
    (tmp_path / "routing.jsonl").write_text('{"kind": "connect_four"}\nnot json\n')
    (tmp_path / "labels.jsonl").write_text("")
    with pytest.raises(ValueError, match="routing.jsonl:2: not JSON"):
        load_examples([tmp_path / "routing.jsonl"], [tmp_path / "labels.jsonl"])


async def test_the_trained_router_is_served_and_predicts_what_it_learned(serve, models_dir):
    stub = await serve(models_dir)
    predictor = RoutePredictor(stub, "router-connect4", 5.0)
    early = await predictor.predict([torch.tensor(features(4)).numpy()])
    late = await predictor.predict([torch.tensor(features(36)).numpy()])
    assert early.best()[0] == Route((AgentName.CHECKER, AgentName.MCTS, AgentName.NEURAL))
    assert late.best()[0] == Route((AgentName.CHECKER, AgentName.NEURAL))
    assert sum(late.probabilities) == pytest.approx(1.0, abs=1e-5)
    assert late.model.startswith("router-connect4@")


@pytest.mark.parametrize("request_, field", [
    (neural_service_pb2.PredictRouteRequest(model="router-connect4"), "steps"),
    (neural_service_pb2.PredictRouteRequest(
        model="router-connect4", steps=[neural_service_pb2.RoutingStep(features=[0.5] * 9)]),
     "steps[0].features"),
    (neural_service_pb2.PredictRouteRequest(
        model="router-connect4",
        steps=[neural_service_pb2.RoutingStep(features=[0.5] * 10),
               neural_service_pb2.RoutingStep(features=[0.5] * 9 + [float("nan")])]),
     "steps[1].features"),
    (neural_service_pb2.PredictRouteRequest(
        model="router-connect4", steps=[neural_service_pb2.RoutingStep(features=[2.0] * 10)]),
     "steps[0].features"),
    (neural_service_pb2.PredictRouteRequest(
        steps=[neural_service_pb2.RoutingStep(features=[0.5] * 10)]), "model"),
])
async def test_bad_input_names_the_field(serve, models_dir, request_, field):
    stub = await serve(models_dir)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.PredictRoute(request_, timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _field(raised.value) == field


async def test_a_model_that_is_no_meta_controller_is_a_failed_precondition(serve, models_dir):
    stub = await serve(models_dir)
    request = neural_service_pb2.PredictRouteRequest(
        model="connect4-pv", steps=[neural_service_pb2.RoutingStep(features=[0.5] * 10)])
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.PredictRoute(request, timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_corrupt_router_checkpoint_is_refused_and_the_old_one_keeps_serving(
        serve, models_dir):
    stub = await serve(models_dir)
    weights = models_dir / "router-connect4" / WEIGHTS_FILE
    weights.write_bytes(weights.read_bytes()[:-7] + b"garbage")
    with pytest.raises(CheckpointError, match="SHA-256"):
        load_checkpoint(models_dir / "router-connect4")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ReloadModel(neural_service_pb2.ReloadModelRequest(name="router-connect4"),
                               timeout=TIMEOUT_S)
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "router-connect4" in raised.value.details()
    predictor = RoutePredictor(stub, "router-connect4", 5.0)
    assert await predictor.predict([torch.tensor(features(36)).numpy()]) is not None
