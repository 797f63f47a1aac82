"""The labelled text workload of `mcts-mesh train router --text --generate N`: questions with gold
answers, asked once per role through an in-process mesh whose orchestrator logs every routing
decision, and a judge of the answers; the text router (`training.router.text`) learns from the
log and the labels this writes.

Generation. `generate` runs the labelled workload: questions with gold answers (GSM8K test,
StrategyQA train, HotpotQA dev) from the evaluation data folder (`libs.data`: MCTS_MESH_DATA_DIR,
else `../shared/data`), the "train" split only (the first byte of SHA-256 of the question even),
each asked once per role through an in-process LLM gateway (the offline provider disabled), mcts
service (for the search) and orchestrator with its routing log on. It needs a language model:
with no provider key or local URL configured it raises
`NoLanguageModel` before starting anything, and an answer from the offline provider stops it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from libs.data import dataset as data_set
from libs.errors import FailedPrecondition
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.text.roles import TextRole
from services.orchestrator.text.self_consistency import (
    extract_answer,
    normalise_number,
    normalise_text,
)
from training.router.text import ROLES

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


DATASET_FOLDERS = {"gsm8k": "gsm8k", "strategyqa": "strategyqa",
                   "hotpotqa": "hotpotqa-dev-simplified"}
"""The data set folder of each dataset (`libs.data`)."""


def read_questions(data_dir: Path | None, dataset: str) -> list[Question]:
    """Every question of `dataset` ("gsm8k", "strategyqa", "hotpotqa"), from its folder found by
    `libs.data.dataset` (in `data_dir`, or the evaluation data folder when None, then the
    repository's `data/`).

    Raises:
        ValueError: an unknown dataset. OSError: its file is missing (`libs.data.MissingDataset`
            when the whole folder is).
    """
    if dataset not in DATASET_FOLDERS:
        raise ValueError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    folder = data_set(DATASET_FOLDERS[dataset], data_dir)
    if dataset == "gsm8k":
        rows = [json.loads(line) for line in
                (folder / "test.jsonl").read_text().splitlines() if line.strip()]
        return [Question(dataset, r["question"], normalise_number(r["answer"].rsplit("####", 1)
                                                                  [1].strip())) for r in rows]
    if dataset == "strategyqa":
        rows = json.loads((folder / "train.json").read_text())
        return [Question(dataset, r["question"], "yes" if r["answer"] else "no") for r in rows]
    rows = json.loads((folder / "hotpot_dev_v1_simplified.json").read_text())
    return [Question(dataset, r["question"], r["answer"]) for r in rows]


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


def sample_questions(data_dir: Path | None, datasets: Sequence[str], per_dataset: int,
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
        settings: `services.llm.settings.LlmSettings`.
    Raises:
        NoLanguageModel: none is configured.
    """
    from services.llm.gateway import configured_providers

    providers = [provider.name for provider in configured_providers(
        settings.model_copy(update={"offline_enabled": False}))]
    if not providers:
        raise NoLanguageModel(
            "the labelled text workload needs a language model (LLM_OPENAI_API_KEY, "
            "LLM_ANTHROPIC_API_KEY or LLM_LOCAL_BASE_URL); none is configured, and the offline "
            "provider is extractive, so its answers are never labels")
    return providers


def generate(log_path: Path, labels_path: Path, data_dir: Path | None, per_dataset: int, seed: int,
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
    from services.llm.settings import LlmSettings

    providers = require_language_model(LlmSettings())
    questions = sample_questions(data_dir, datasets, per_dataset, seed)
    return asyncio.run(_generate(log_path, labels_path, questions, providers, seed, roles,
                                 simulations))


async def _generate(log_path: Path, labels_path: Path, questions: Sequence[Question],
                    providers: list[str], seed: int, roles: Sequence[str],
                    simulations: int) -> dict:
    mesh = await _TextMesh.start(log_path, providers)
    started = time.perf_counter()
    labels_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with labels_path.open("a") as labels:
            failed = await _ask_all(mesh, labels, questions, seed, roles, simulations)
    finally:
        await mesh.close()
    return {"questions": len(questions), "requests": len(questions) * len(roles),
            "failed": failed, "wall_s": round(time.perf_counter() - started, 1)}


async def _no_passages(problem, timeout_s: float) -> tuple:
    return ()  # the questions carry what they need; HotpotQA's paragraphs are not here


@dataclass
class _TextMesh:
    """The labelled text workload's mesh, in this process: an LLM gateway (the offline provider
    off) and an mcts server on loopback, and the orchestrator's servicer over channels to them
    with its routing log on (no retrieval: `_no_passages`)."""

    servicer: Any
    deadline_s: float
    routing_log: Any
    channels: tuple
    servers: tuple

    @classmethod
    async def start(cls, log_path: Path, providers: list[str]) -> _TextMesh:
        from mesh.llm.v1 import llm_service_pb2_grpc
        from mesh.mcts.v1 import mcts_service_pb2_grpc

        from libs.channels import Keepalive, open_channel
        from libs.server import start_server
        from services.llm.main import build_servicers as build_llm
        from services.llm.settings import LlmSettings
        from services.mcts.main import build_servicers as build_mcts
        from services.mcts.settings import MctsSettings
        from services.orchestrator.agents.llm import LlmAgent
        from services.orchestrator.api.servicer import OrchestratorServicer
        from services.orchestrator.routing.log import RoutingLog
        from services.orchestrator.settings import OrchestratorSettings
        from services.orchestrator.text.reasoning import RoleServices

        llm_settings = LlmSettings(port=0, fallback_order=providers, offline_enabled=False)
        gateway = await start_server("llm", llm_settings, *await build_llm(llm_settings))
        mcts_settings = MctsSettings(port=0, neural_target="127.0.0.1:1")
        # The channels the served mcts and orchestrator would open (services/*/main.py).
        no_neural = open_channel(mcts_settings.neural_target,
                                 keepalive=Keepalive.of(mcts_settings))
        mcts = await start_server("mcts", mcts_settings,
                                  *await build_mcts(mcts_settings, no_neural))
        settings = OrchestratorSettings()
        llm_channel, mcts_channel = (
            open_channel(f"127.0.0.1:{port}", connect_timeout_s=settings.connect_timeout_s,
                         keepalive=Keepalive.of(settings)) for port in (gateway.port, mcts.port))
        llm = llm_service_pb2_grpc.LlmServiceStub(llm_channel)
        routing_log = RoutingLog(log_path, settings.routing_log_max_bytes,
                                 settings.routing_log_backups)
        servicer = OrchestratorServicer(
            settings, AgentSet(text=[LlmAgent(llm, settings.llm_deadline_s,
                                              settings.max_answer_tokens)]),
            routing_log=routing_log,
            roles=RoleServices(llm=llm, retrieve=_no_passages,
                               mcts=mcts_service_pb2_grpc.MctsServiceStub(mcts_channel),
                               llm_deadline_s=settings.llm_deadline_s))
        return cls(servicer, settings.request_deadline_s, routing_log,
                   (llm_channel, mcts_channel, no_neural), (gateway, mcts))

    async def close(self) -> None:
        """Closes the routing log and the channels, then stops the servers."""
        self.routing_log.close()
        for channel in self.channels:
            await channel.close()
        for server in self.servers:
            await server.stop(0)


async def _ask_all(mesh: _TextMesh, labels: IO[str], questions: Sequence[Question], seed: int,
                   roles: Sequence[str], simulations: int) -> int:
    """Asks every question once per role through the servicer, writing a label line for each
    answer; returns the number of failed requests.

    Raises:
        NoLanguageModel: the offline provider answered.
    """
    from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

    from services.orchestrator.api.roles import ROLE_TO_PROTO

    context = _Context(mesh.deadline_s)
    failed = 0
    for index, question in enumerate(questions):
        for role in roles:
            thread_id = f"text-{seed}-{index}-{role}"
            request = pb.AnswerQueryRequest(query=question.query, thread_id=thread_id,
                                            role=ROLE_TO_PROTO[TextRole(role)])
            if role == TextRole.SEARCH:
                request.mcts_iterations = simulations
            try:
                response = await mesh.servicer.AnswerQuery(request, context)
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
    return failed


class _Context:
    """The servicer's view of a gRPC call: only its remaining time."""

    def __init__(self, deadline_s: float) -> None:
        self._deadline_s = deadline_s

    def time_remaining(self) -> float:
        return self._deadline_s
