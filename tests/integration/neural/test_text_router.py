"""The text router end to end: `train router --text` on a labelled text log made here (arithmetic
questions that only refine answers right, questions about people that only drafts answer right)
trains LoRA adapters on the packaged MiniLM that pick the right role for held-out questions of each
kind; the neural service serves the checkpoint through PredictTextRoute (bad input is
INVALID_ARGUMENT naming the field, an unknown model NOT_FOUND); the orchestrator follows it above
its threshold and the rules below it, when the neural service is down, and when the chosen role
cannot run; the labelled workload refuses to run with only the offline provider."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mesh.llm.v1 import llm_service_pb2
from mesh.neural.v1 import neural_service_pb2, neural_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.server import start_server
from mcts_mesh import cli
from services.llm.settings import LlmSettings
from services.neural.checkpoint import load_checkpoint
from services.neural.evaluator import PositionEvaluator
from services.neural.main import build_servicers
from services.neural.settings import NeuralSettings
from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.routing.log import RoutingLog
from services.orchestrator.routing.predictors import TextRoutePredictor
from services.orchestrator.routing.selection import AgentSet, Routers
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.reasoning import RoleServices
from training.router.text import ROLES, TextRouterConfig, load_text_examples, train_text_router
from training.router.text_workload import (
    NoLanguageModel,
    Question,
    is_correct,
    require_language_model,
)

ARITHMETIC = ["What is 17 plus 25?", "What is 9 times 8?", "What is 144 divided by 12?",
              "What is 63 minus 27?", "What is 15 times 4?", "What is 81 plus 19?"]
PEOPLE = ["Who wrote the novel Emma?", "Who painted the Mona Lisa?",
          "Who discovered penicillin?", "Who composed the Moonlight Sonata?",
          "Who founded the city of Alexandria?", "Who invented the telephone?"]
HELD_OUT = {"refine": ["What is 36 times 3?", "What is 250 minus 75?"],
            "draft": ["Who wrote Hamlet?", "Who sculpted the statue of David?"]}


def write_text_log(directory: Path) -> tuple[Path, Path]:
    """Arithmetic: refine right, drafts wrong; people: drafts right, refine wrong (refine costs
    more tokens and time either way). Plus lines that must not count: one answered by the
    offline provider, one without a label, one Connect Four line."""
    log, labels = [], []
    for kind, queries in (("refine", ARITHMETIC), ("draft", PEOPLE)):
        for index, query in enumerate(queries):
            for role, tokens, ms in (("draft", 300, 900.0), ("refine", 900, 2500.0)):
                thread = f"{kind}-{index}-{role}"
                log.append({"kind": "text", "query": query, "thread_id": thread, "routes": [],
                            "votes": [], "role": role, "role_decided_by": "request",
                            "provider": "openai", "offline": False, "total_tokens": tokens,
                            "latency_ms": ms})
                labels.append({"thread_id": thread, "role": role, "correct": role == kind})
    log.append({"kind": "text", "query": "offline?", "thread_id": "off", "role": "draft",
                "provider": "offline", "offline": True, "total_tokens": 0, "latency_ms": 5.0})
    labels.append({"thread_id": "off", "role": "draft", "correct": True})
    log.append({"kind": "text", "query": "unlabelled", "thread_id": "none", "role": "draft",
                "provider": "openai", "total_tokens": 1, "latency_ms": 5.0})
    log.append({"kind": "connect_four", "query": "44", "thread_id": "c4", "routes": [],
                "latency_ms": 5.0})
    (directory / "text-routing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    (directory / "text-labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    return directory / "text-routing.jsonl", directory / "text-labels.jsonl"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A models folder holding `router-text` trained on the tiny log, and its report."""
    directory = tmp_path_factory.mktemp("text-router")
    log, labels = write_text_log(directory)
    report = train_text_router(TextRouterConfig(directory / "models" / "router-text", [log],
                                                [labels], epochs=7, lr=5e-3, lora_rank=4))
    return directory / "models", report


def test_the_join_keeps_labelled_language_model_answers_only(tmp_path):
    log, labels = write_text_log(tmp_path)
    examples = load_text_examples([log], [labels])
    assert sorted(e.query for e in examples) == sorted(ARITHMETIC + PEOPLE)
    arithmetic = next(e for e in examples if e.query == ARITHMETIC[0])
    assert arithmetic.outcomes == {"draft": [(False, 300, 900.0)],
                                   "refine": [(True, 900, 2500.0)]}
    utilities = arithmetic.utilities(0.01, 0.01)
    # refine: 1 - 0.009 - 0.025; draft: 0 - 0.003 - 0.009; untried roles: the worst tried one's.
    assert utilities[ROLES.index("refine")] == pytest.approx(0.966)
    assert utilities[ROLES.index("draft")] == pytest.approx(-0.012)
    assert utilities[ROLES.index("search")] == pytest.approx(-0.012)


def test_the_trained_router_picks_the_right_role_for_held_out_queries(trained):
    models, report = trained
    assert report["examples"] == 12
    assert report["targets"] == {"draft": 6, "decompose": 0, "refine": 6, "search": 0}
    assert report["choices"] == {"draft": 6, "decompose": 0, "refine": 6, "search": 0}
    history = report["history"]
    assert len(history) == 7 and history[-1]["loss"] < history[0]["loss"]
    checkpoint = load_checkpoint(models / "router-text")
    assert checkpoint.architecture == "router_text"
    assert checkpoint.metadata["history"] == history
    # Only the adapters and the head are in the checkpoint, not the 22 M frozen weights.
    trained_numbers = sum(p.numel() for p in checkpoint.model.state_dict().values())
    assert trained_numbers < 100_000
    from services.neural.models.router_text import predict
    for role, queries in HELD_OUT.items():
        for query in queries:
            probabilities = predict(checkpoint.model, query)
            best = max(range(len(ROLES)), key=probabilities.__getitem__)
            assert ROLES[best] == role, (query, probabilities)
            assert probabilities[best] > 0.5


@pytest.fixture
async def neural(trained):
    models, _ = trained
    settings = NeuralSettings(port=0, models_dir=models, device="cpu")
    evaluator = PositionEvaluator(settings.default_model, settings.max_batch, settings.max_wait_ms)
    servicers, ready = await build_servicers(settings, evaluator)
    server = await start_server("neural", settings, servicers, ready)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    yield neural_service_pb2_grpc.NeuralServiceStub(channel)
    await channel.close()
    await server.stop(0)
    await evaluator.close()


def _field(error: grpc.aio.AioRpcError) -> str:
    for detail in rpc_status.from_call(error).details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            return bad.field_violations[0].field
    raise AssertionError("no BadRequest detail")


async def test_the_neural_service_serves_the_text_router(neural):
    response = await neural.PredictTextRoute(neural_service_pb2.PredictTextRouteRequest(
        model="router-text", query=HELD_OUT["refine"][0]), timeout=30)
    assert [entry.route for entry in response.routes] == list(ROLES)
    assert sum(entry.probability for entry in response.routes) == pytest.approx(1.0, abs=1e-5)
    assert max(response.routes, key=lambda e: e.probability).route == "refine"
    assert response.model.name == "router-text" and response.model.architecture == "router_text"


@pytest.mark.parametrize(("model", "query", "field"), [
    ("", "What is 2 plus 2?", "model"),
    ("router-text", "", "query"),
    ("router-text", "   ", "query"),
    ("router-text", "x" * 10_001, "query"),
])
async def test_bad_input_is_invalid_argument_naming_the_field(neural, model, query, field):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await neural.PredictTextRoute(neural_service_pb2.PredictTextRouteRequest(
            model=model, query=query), timeout=30)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert _field(caught.value) == field


async def test_an_unknown_model_is_not_found(neural):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await neural.PredictTextRoute(neural_service_pb2.PredictTextRouteRequest(
            model="router-nope", query="Who?"), timeout=30)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


class FakeGateway:
    """LlmService.Generate answering every prompt (draft, critique, revision) the same way: a
    critique of "NO ISSUES" ends refine after its first round."""

    def __init__(self, offline: bool = False) -> None:
        self.offline = offline
        self.calls = 0

    async def Generate(self, request, timeout=None):  # noqa: N802 - the gRPC method's name
        self.calls += 1
        return llm_service_pb2.GenerateResponse(
            text="NO ISSUES. The answer is 108.", provider="offline" if self.offline else "openai",
            model="scripted", offline=self.offline,
            usage=llm_service_pb2.Usage(prompt_tokens=20, completion_tokens=10))


class Context:
    def time_remaining(self) -> float:
        return 30.0


async def no_passages(problem, timeout_s):
    return ()


def orchestrator(stub, threshold: float, gateway: FakeGateway,
                 log: RoutingLog | None = None) -> OrchestratorServicer:
    settings = OrchestratorSettings(text_router_model="router-text",
                                    text_router_threshold=threshold, text_sample_count=1)
    return OrchestratorServicer(
        settings, AgentSet(text=[LlmAgent(gateway, 5.0, 64)]),
        Routers(text_predictor=TextRoutePredictor(stub, "router-text", 30.0)), routing_log=log,
        roles=RoleServices(llm=gateway, retrieve=no_passages))


async def test_the_orchestrator_follows_the_text_router_above_the_threshold(neural, tmp_path):
    log = RoutingLog(tmp_path / "routing.jsonl", 1 << 20, 1)
    servicer = orchestrator(neural, 0.5, FakeGateway(), log)
    refine = await servicer.AnswerQuery(pb.AnswerQueryRequest(
        query=HELD_OUT["refine"][0], thread_id="t1"), Context())
    assert refine.role == pb.TEXT_ROLE_REFINE
    assert refine.route_decider == pb.ROUTE_DECIDER_LEARNED
    assert refine.route_confidence > 0.5
    draft = await servicer.AnswerQuery(pb.AnswerQueryRequest(
        query=HELD_OUT["draft"][0], thread_id="t2"), Context())
    assert draft.role == pb.TEXT_ROLE_DRAFT
    assert draft.route_decider == pb.ROUTE_DECIDER_LEARNED  # the router chose the drafts
    assert draft.route_confidence > 0.5
    named = await servicer.AnswerQuery(pb.AnswerQueryRequest(
        query=HELD_OUT["refine"][0], role=pb.TEXT_ROLE_DRAFT, thread_id="t3"), Context())
    assert named.role == pb.TEXT_ROLE_DRAFT and named.route_confidence == 0.0
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "routing.jsonl").read_text().splitlines()]
    assert [(r["thread_id"], r["role"], r["role_decided_by"]) for r in lines] == [
        ("t1", "refine", "learned"), ("t2", "draft", "learned"), ("t3", "draft", "rules")]
    assert lines[0]["total_tokens"] == refine.total_tokens > 0
    assert lines[0]["provider"] == "openai" and lines[0]["offline"] is False


async def test_below_the_threshold_the_rules_decide(neural):
    probe = TextRoutePredictor(neural, "router-text", 30.0)
    prediction = await probe.predict_text(HELD_OUT["refine"][0])
    _, confidence = prediction.best()
    assert confidence < 1.0
    servicer = orchestrator(neural, min(1.0, confidence + 1e-3), FakeGateway())
    response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query=HELD_OUT["refine"][0]),
                                          Context())
    assert response.role == pb.TEXT_ROLE_DRAFT
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert response.route_confidence == pytest.approx(confidence)


async def test_with_the_neural_service_down_the_rules_decide():
    channel = grpc.aio.insecure_channel("127.0.0.1:1")
    servicer = orchestrator(neural_service_pb2_grpc.NeuralServiceStub(channel), 0.5,
                            FakeGateway())
    response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query=HELD_OUT["refine"][0]),
                                          Context())
    await channel.close()
    assert response.role == pb.TEXT_ROLE_DRAFT
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert response.route_confidence == 0.0
    assert response.answer


async def test_a_chosen_role_that_needs_a_language_model_falls_back_to_drafts(neural):
    """Only the offline provider answers: refine is refused, so the rules' drafts answer."""
    gateway = FakeGateway(offline=True)
    servicer = orchestrator(neural, 0.5, gateway)
    response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query=HELD_OUT["refine"][0]),
                                          Context())
    assert response.role == pb.TEXT_ROLE_DRAFT
    assert response.route_decider == pb.ROUTE_DECIDER_RULES
    assert response.offline and response.route_confidence > 0.5


def test_answers_are_judged_against_the_gold_answer():
    assert is_correct(Question("gsm8k", "q", "1200"), "... so 1,200 in all. The answer is 1200.")
    assert not is_correct(Question("gsm8k", "q", "1200"), "The answer is 120.")
    assert is_correct(Question("strategyqa", "q", "no"), "They could not. The answer is no.")
    assert not is_correct(Question("strategyqa", "q", "no"), "The answer is yes.")
    assert is_correct(Question("hotpotqa", "q", "the Eiffel Tower"), "The answer is Eiffel Tower.")


def test_the_workload_refuses_without_a_language_model(monkeypatch, tmp_path, capsys):
    for name in ("LLM_OPENAI_API_KEY", "LLM_ANTHROPIC_API_KEY", "LLM_LOCAL_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(NoLanguageModel):
        require_language_model(LlmSettings())
    assert require_language_model(LlmSettings(local_base_url="http://127.0.0.1:9")) \
        == ["local"]
    with pytest.raises(SystemExit) as caught:
        cli.main(["train", "router", "--text", "--generate", "2", "--router-dir",
                  str(tmp_path / "run")])
    message = str(caught.value.code)
    assert message.startswith("train router --text: FAILED_PRECONDITION: ")
    assert "language model" in message and "\n" not in message
    assert not (tmp_path / "run").exists()  # nothing was run, nothing was labelled
