"""The text roles end to end through the real gateway (and, for the search over steps, the real
mcts service's SearchExternal): the orchestrator's servicer calls a grpc.aio LlmService on port 0
whose "local" provider is the scripted OpenAI chat-completions server of `llm_wire` (every reply
reports 42 prompt + 7 completion tokens, $0.056 at the test's prices). The scripted replies make
decompose's sub-questions and composed answer, refine's stop, the search's chosen trajectory and
the budget stops exact. The offline provider is never a model's sub-answer, critique or step."""

from __future__ import annotations

import grpc
import pytest
from llm_wire import Reply
from mesh.llm.v1 import llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb
from prometheus_client import REGISTRY

from libs.errors import FailedPrecondition, InvalidArgument
from libs.server import start_server
from services.llm.main import build_servicers
from services.llm.settings import LlmSettings
from services.mcts.main import build_servicers as build_mcts_servicers
from services.mcts.settings import MctsSettings
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.problems.arithmetic import NotArithmetic, check_step, evaluate
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text import prompts
from services.orchestrator.text.query import Passage
from services.orchestrator.text.reasoning import RoleServices
from services.orchestrator.text.step_search import StepNode, StepTree

PRICES = {"llama3.2": (1000.0, 2000.0)}
CALL_TOKENS = 49
CALL_COST = 0.056
QUESTION = "Ann has 3 bags of 4 apples and finds 5 more. How many apples does she have?"


class Retrieval:
    """Retrieval for the roles: one passage per query, named after the query's order; records the
    queries."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def __call__(self, problem, timeout_s: float) -> tuple[Passage, ...]:
        self.queries.append(problem.query)
        number = len(self.queries)
        return (Passage(f"d{number}", "Apples", f"Passage {number}.", 0.5, "a.txt",
                        cosine_similarity=0.5),)


class FakeContext:
    def time_remaining(self) -> float:
        return 30.0


@pytest.fixture
async def mesh(wire):
    """Starts a gateway (the scripted server as provider "local") and an mcts service; returns a
    function making the servicer and its retrieval."""
    running = []

    async def start(fallback_order=("local",), offline_enabled=True,
                    **orchestrator) -> tuple[OrchestratorServicer, Retrieval]:
        settings = LlmSettings(port=0, local_base_url=f"{wire.url}/v1", max_retries=0,
                                      prices=PRICES, fallback_order=list(fallback_order),
                                      offline_enabled=offline_enabled)
        servicers, ready = await build_servicers(settings)
        server = await start_server("llm", settings, servicers, ready)
        mcts_settings = MctsSettings(port=0, neural_target="127.0.0.1:1")
        neural_channel = grpc.aio.insecure_channel("127.0.0.1:1")
        mcts_servicers, mcts_ready = await build_mcts_servicers(mcts_settings, neural_channel)
        mcts_server = await start_server("mcts", mcts_settings, mcts_servicers, mcts_ready)
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{server.port}"),
                    grpc.aio.insecure_channel(f"127.0.0.1:{mcts_server.port}"), neural_channel]
        running.append((server, mcts_server, channels))
        retrieval = Retrieval()
        roles = RoleServices(llm=llm_service_pb2_grpc.LlmServiceStub(channels[0]),
                             retrieve=retrieval,
                             mcts=mcts_service_pb2_grpc.MctsServiceStub(channels[1]))
        servicer = OrchestratorServicer(OrchestratorSettings(**orchestrator), AgentSet(),
                                        roles=roles)
        return servicer, retrieval

    yield start
    for server, mcts_server, channels in running:
        for channel in channels:
            await channel.close()
        await server.stop(0)
        await mcts_server.stop(0)


async def ask(servicer, **fields) -> pb.AnswerQueryResponse:
    return await servicer.AnswerQuery(pb.AnswerQueryRequest(query=QUESTION, **fields),
                                      FakeContext())


def calls_counted(role: str, purpose: str) -> float:
    return REGISTRY.get_sample_value("mesh_orchestrator_text_role_calls_total",
                                     {"role": role, "purpose": purpose}) or 0.0


def user_messages(wire) -> list[str]:
    return [body["messages"][-1]["content"] for _, body in wire.requests]


async def test_decompose_answers_sub_questions_in_order_then_composes(mesh, wire):
    servicer, retrieval = await mesh()
    wire.script[:] = [
        Reply(text="Q: How many apples are in the bags?\nQ: How many apples does she have "
                   "after finding 5?"),
        Reply(text="3 bags of 4 apples are 12 apples."),
        Reply(text="12 + 5 = 17 apples."),
        Reply(text="She has 17 apples.\nAnswer: 17"),
    ]
    before = calls_counted("decompose", "sub-answer")
    response = await ask(servicer, role=pb.TEXT_ROLE_DECOMPOSE)
    assert response.role == pb.TEXT_ROLE_DECOMPOSE
    assert calls_counted("decompose", "sub-answer") - before == 2
    assert [(s.question, s.answer, list(s.document_ids)) for s in response.sub_questions] == [
        ("How many apples are in the bags?", "3 bags of 4 apples are 12 apples.", ["d2"]),
        ("How many apples does she have after finding 5?", "12 + 5 = 17 apples.", ["d3"]),
    ]
    assert response.answer == "She has 17 apples.\nAnswer: 17"
    assert response.stop_reason == "composed from 2 sub-question(s)"
    # The question, then each sub-question, is retrieved; each sub-answer sees those before it.
    assert retrieval.queries == [QUESTION, "How many apples are in the bags?",
                                 "How many apples does she have after finding 5?"]
    messages = user_messages(wire)
    assert "Q: How many apples are in the bags?\nA: 3 bags of 4 apples are 12 apples." \
        in messages[2]
    assert "Passage 3." in messages[2] and "Passage 1." in messages[3]
    assert response.total_tokens == 4 * CALL_TOKENS
    assert response.cost_usd == pytest.approx(4 * CALL_COST) and response.cost_known
    assert response.confidence == pytest.approx(0.5)  # the question's passages' grounding
    assert list(response.agents) == [pb.AGENT_RETRIEVAL, pb.AGENT_LLM]
    assert [s.source for s in response.sources] == ["a.txt"] and not response.passages_only


async def test_the_token_budget_stops_decompose_before_composing(mesh, wire):
    servicer, _ = await mesh()
    wire.script[:] = [Reply(text="Q: How many apples are in the bags?\nQ: And then?"),
                      Reply(text="12 apples.")]
    response = await ask(servicer, role=pb.TEXT_ROLE_DECOMPOSE, max_tokens=100)
    # The list (49 tokens) and the first sub-answer (98): the second would need 49 more.
    assert wire.count("/v1/chat/completions") == 2 and response.total_tokens == 98
    assert response.answer == "12 apples." and len(response.sub_questions) == 1
    assert response.stop_reason == ("token budget: 98 of 100 used, another call would need "
                                    "about 49; stopped before composing the answer")


async def test_a_failing_gateway_answers_the_passages_alone_with_the_failure(mesh, wire):
    servicer, _ = await mesh(offline_enabled=False)
    wire.script[:] = [Reply(text="A draft."), Reply(status=500)]
    response = await ask(servicer, role=pb.TEXT_ROLE_REFINE)
    assert response.passages_only and response.answer == "" and response.confidence == 0.0
    assert [(f.agent, f.code) for f in response.failures] == [(pb.AGENT_LLM, "UNAVAILABLE")]
    assert response.total_tokens == CALL_TOKENS  # the draft before the failure is counted
    assert [s.document_id for s in response.sources] == ["d1"]


async def test_refine_stops_when_the_critique_finds_nothing(mesh, wire):
    servicer, _ = await mesh()
    wire.script[:] = [Reply(text="She has 3 * 4 + 5 = 18 apples."),
                      Reply(text="3 * 4 + 5 is 17, not 18."),
                      Reply(text="She has 3 * 4 + 5 = 17 apples."),
                      Reply(text="No issues.")]
    response = await ask(servicer, role=pb.TEXT_ROLE_REFINE)
    assert response.answer == "She has 3 * 4 + 5 = 17 apples."
    assert [(r.draft, r.critique, r.revised) for r in response.refinements] == [
        ("She has 3 * 4 + 5 = 18 apples.", "3 * 4 + 5 is 17, not 18.", True),
        ("She has 3 * 4 + 5 = 17 apples.", "No issues.", False),
    ]
    assert response.iterations == 2 and wire.count("/v1/chat/completions") == 4
    assert response.stop_reason == "the critique of round 2 found nothing to fix"
    assert "Critique:\n3 * 4 + 5 is 17, not 18." in user_messages(wire)[2]


async def test_refine_stops_at_its_round_limit(mesh, wire):
    servicer, _ = await mesh()
    wire.script[:] = [Reply(text="18"), Reply(text="Wrong sum."), Reply(text="17")]
    response = await ask(servicer, role=pb.TEXT_ROLE_REFINE, max_refinements=1)
    assert response.answer == "17" and response.iterations == 1
    assert response.stop_reason == ("refinement limit: 1 round(s) run, the last critique still "
                                    "found something")


async def test_the_cost_budget_stops_refine_with_the_latest_draft(mesh, wire):
    servicer, _ = await mesh()
    wire.script[:] = [Reply(text="18"), Reply(text="Wrong sum."), Reply(text="17")]
    response = await ask(servicer, role=pb.TEXT_ROLE_REFINE, max_cost_usd=0.12)
    # Draft $0.056, critique $0.112: a revision would cost about $0.056 more, over $0.12.
    assert wire.count("/v1/chat/completions") == 2 and response.answer == "18"
    assert response.stop_reason == ("cost budget: $0.112000 of $0.120000 used, another call "
                                    "would cost about $0.056000; the answer is the latest draft")
    assert response.cost_usd == pytest.approx(0.112)


STEPS = {
    # steps so far -> (proposals, scores out of 10)
    "": (["3 * 4 = 12 apples in the bags.", "3 * 4 = 13 apples in the bags."], [6, 9]),
    "3 * 4 = 12 apples in the bags.": (
        ["12 + 5 = 17. The answer is 17.", "12 + 5 = 18. The answer is 18."], [8, 9]),
    "3 * 4 = 13 apples in the bags.": (["13 + 5 = 18. The answer is 18."], [2]),
}


def step_reply(body: dict) -> Reply:
    """Proposals and scores by the steps the prompt holds (whatever order the tree asks in)."""
    message = body["messages"][-1]["content"]
    steps = message.split("Steps so far:\n", 1)[1].split("\n\nCandidates:", 1)[0]
    last = "" if steps == prompts.NONE_YET else steps.splitlines()[-1].split(". ", 1)[1]
    proposals, scores = STEPS[last]
    if "Candidates:" in message:
        return Reply(text="\n".join(f"{i}: {s}" for i, s in enumerate(scores, 1)))
    return Reply(text="\n".join(f"Step: {p}" for p in proposals))


async def test_the_search_over_steps_chooses_the_scripted_trajectory(mesh, wire):
    servicer, _ = await mesh()
    wire.respond = step_reply
    response = await ask(servicer, mcts_iterations=40, step_branching=2, max_steps=3)
    search = response.step_search
    # The model prefers the wrong equations (9 of 10); the checker sets them to 0, so the right
    # path is the best complete trajectory.
    assert [(s.text, s.value, s.checked, s.final) for s in search.trajectory] == [
        ("3 * 4 = 12 apples in the bags.", pytest.approx(0.6), True, False),
        ("12 + 5 = 17. The answer is 17.", pytest.approx(0.8), True, True),
    ]
    assert search.complete and response.role == pb.TEXT_ROLE_SEARCH
    assert response.answer == "3 * 4 = 12 apples in the bags.\n12 + 5 = 17. The answer is 17."
    assert response.confidence == pytest.approx(0.8)
    assert search.statistics.simulations == 40 and search.statistics.tree_size >= 3
    assert search.max_depth == 2 and search.statistics.max_depth >= 2
    root_visits = {a.action: a.visits for a in search.statistics.actions}
    assert root_visits[0] > root_visits.get(1, 0)
    calls = wire.count("/v1/chat/completions")
    assert calls % 2 == 0 and response.total_tokens == calls * CALL_TOKENS
    # The tree never expands the wrong first step (its prior is the floor, 0.01): 2 leaves
    # expanded, 4 calls; then it revisits the known final steps.
    assert search.steps_proposed == 4 and calls == 4 and search.leaves_evaluated == 3
    assert response.stop_reason == "search finished: 40 simulation(s), 3 leaf(s) evaluated"
    assert list(response.agents) == [pb.AGENT_RETRIEVAL, pb.AGENT_LLM, pb.AGENT_MCTS]


async def test_the_token_budget_stops_the_search_and_says_so(mesh, wire):
    servicer, _ = await mesh()
    wire.respond = step_reply
    response = await ask(servicer, mcts_iterations=40, step_branching=2, max_steps=3,
                         max_tokens=150)
    # The root's proposal and evaluation use 98 tokens; the right step's proposal 49 more (147);
    # its evaluation would need about 49 more, over 150.
    assert wire.count("/v1/chat/completions") == 3 and response.total_tokens == 147
    assert response.stop_reason == ("token budget: 147 of 150 used, another call would need "
                                    "about 49; the search stopped after 1 leaf(s); no trajectory "
                                    "reached a final answer")
    search = response.step_search
    assert not search.complete and not search.HasField("statistics")
    assert [s.text for s in search.trajectory] == ["3 * 4 = 12 apples in the bags."]
    assert search.leaves_evaluated == 1 and search.steps_proposed == 2
    assert response.answer == "3 * 4 = 12 apples in the bags."


@pytest.mark.parametrize("fields", [{"role": pb.TEXT_ROLE_DECOMPOSE},
                                    {"role": pb.TEXT_ROLE_REFINE}, {"mcts_iterations": 5}])
async def test_with_only_the_offline_provider_a_role_is_failed_precondition(mesh, wire, fields):
    servicer, _ = await mesh(fallback_order=("offline",))
    with pytest.raises(FailedPrecondition, match="needs a language model"):
        await ask(servicer, **fields)
    assert wire.count("/v1/chat/completions") == 0


@pytest.mark.parametrize(("fields", "field"), [
    ({"role": 99}, "role"),
    ({"role": pb.TEXT_ROLE_SEARCH}, "mcts_iterations"),
    ({"role": pb.TEXT_ROLE_REFINE, "mcts_iterations": 5}, "role"),
    ({"mcts_iterations": 0}, "mcts_iterations"),
    ({"mcts_iterations": 10_001}, "mcts_iterations"),
    ({"mcts_iterations": 5, "step_branching": 9}, "step_branching"),
    ({"mcts_iterations": 5, "max_steps": 0}, "max_steps"),
    ({"role": pb.TEXT_ROLE_REFINE, "max_refinements": 11}, "max_refinements"),
])
async def test_bad_role_fields_are_invalid_argument_naming_them(mesh, wire, fields, field):
    servicer, _ = await mesh()
    with pytest.raises(InvalidArgument) as caught:
        await ask(servicer, **fields)
    assert caught.value.field == field
    assert wire.count("/v1/chat/completions") == 0


# The pure parts: the checker and the templates' parsers.

@pytest.mark.parametrize(("step", "equations", "wrong"), [
    ("She has 3 * 4 = 12 apples", 1, 0),
    ("tax 5 + 3 = 9", 1, 1),
    ("(2+3)*4 = 20 and 10/4=2.5", 2, 0),
    ("$1,000 - $250 = $750 left", 1, 0),
    ("x = 5, so nothing to check", 0, 0),
    ("2, 3 + 4 = 7", 0, 0),
])
def test_the_checker_evaluates_each_equation(step, equations, wrong):
    check = check_step(step)
    assert (len(check.equations), len(check.wrong)) == (equations, wrong)


@pytest.mark.parametrize("text", ["__import__('os').system('true')", "(1).real", "2 ** 1000",
                                  "abs(-1)", "1 / 0", "x"])
def test_the_checker_never_evaluates_anything_but_arithmetic(text):
    with pytest.raises(NotArithmetic):
        evaluate(text)


def test_the_parsers_read_the_templates_replies():
    assert prompts.parse_sub_questions("Sure.\nQ: a?\n2. Q: b?\nQ: a?", 5) == ["a?", "b?"]
    assert prompts.parse_sub_questions("What is a?\nWhat is b?", 1) == ["What is a?"]
    assert prompts.parse_steps("Step: x\n- Step 2: y\nStep: z", 2) == ["x", "y"]
    assert prompts.parse_scores("1: 7\n2) 12\n4: 3", 3) == [0.7, 1.0, None]
    assert prompts.finds_nothing("NO ISSUES.") and prompts.finds_nothing("no issues")
    assert not prompts.finds_nothing("Two issues: no issues with units, but the sum is wrong")


class ScriptedModel:
    """A `LanguageModel` stand-in answering from a list, recording the purposes asked."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.purposes: list[str] = []

    async def ask(self, purpose: str, prompt: str, passages=(), temperature: float = 0.0) -> str:
        self.purposes.append(purpose)
        return self.replies.pop(0)


async def test_the_tree_answers_leaves_as_documented():
    tree = StepTree(branching=3, max_steps=2)
    model = ScriptedModel("Step: 2 * 3 = 6\nStep: 2 * 3 = 7\nStep: The answer is 6.", "1: 5\n3: 10")
    root = await tree.answer(model, "q", (), ())
    # Scores 0.5, unscored (0), 1.0; the false equation is 0 whatever its score; priors add 0.01.
    assert list(root.priors) == pytest.approx([0.51, 0.01, 1.01]) and root.value == 0.0
    assert not root.terminal and model.purposes == ["propose", "evaluate"]
    final = await tree.answer(model, "q", (), (2,))  # states the answer: terminal, 2v - 1
    assert final.terminal and final.value == pytest.approx(1.0)
    dead_end = ScriptedModel("")
    assert (await tree.answer(dead_end, "q", (), (0,))).value == -1.0  # nothing proposed
    tree.nodes[(0, 0)] = StepNode((0, 0), "6 + 1 = 7", 0.9)
    deep = await tree.answer(model, "q", (), (0, 0))  # max_steps without an answer
    assert deep.terminal and deep.value == -1.0
    trajectory, complete = tree.best()
    assert [n.text for n in trajectory] == ["The answer is 6."] and complete
