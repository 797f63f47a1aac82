"""GSM8K through the text path: one greedy draft vs self-consistency (k = 5) vs search over
reasoning steps, on the first N test questions of ../shared/data/gsm8k (default 200), with a real
provider.

The three are interleaved question by question in one process (the same model, the same machine
load): the greedy draft is one Generate call at temperature 0 through an in-process LLM gateway;
self-consistency is AnswerQuery with `sample_count` k at the orchestrator's temperature and one
iteration (exactly k drafts, the majority answer); the search is AnswerQuery with
`mcts_iterations` through an in-process mcts service's SearchExternal. No retrieval (the questions
need none). A question counts as right when the extracted final answer equals GSM8K's "#### n".

Providers come from the gateway's own settings (LLM_OPENAI_API_KEY, LLM_ANTHROPIC_API_KEY,
LLM_LOCAL_BASE_URL, LLM_PRICES for the cost); the offline provider is left out, so a provider's
failure counts as a failed question rather than an extractive answer. With no provider
configured the bench says so and exits 0.

    .venv/bin/python bench/gsm8k.py [--questions 200] [--samples 5] [--simulations 20]
        [--branching 3] [--max-steps 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from mesh.llm.v1 import llm_service_pb2, llm_service_pb2_grpc
from mesh.mcts.v1 import mcts_service_pb2_grpc
from mesh.orchestrator.v1 import orchestrator_service_pb2 as pb

from libs.server import start_server
from services.llm.main import build_servicers as build_llm
from services.llm.settings import LlmSettings
from services.mcts.main import build_servicers as build_mcts
from services.mcts.settings import MctsSettings
from services.orchestrator.agents.llm import LlmAgent
from services.orchestrator.api.servicer import OrchestratorServicer
from services.orchestrator.routing.selection import AgentSet
from services.orchestrator.settings import OrchestratorSettings
from services.orchestrator.text.reasoning import RoleServices
from services.orchestrator.text.self_consistency import extract_answer, normalise_number

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"
INSTRUCTION = "\nSolve it step by step and end with \"The answer is <number>\"."
MODES = ("greedy", "self-consistency", "search")


@dataclass
class Tally:
    """One mode's results."""

    right: int = 0
    asked: int = 0
    tokens: list[int] = field(default_factory=list)
    cost_usd: float = 0.0
    cost_known: bool = True
    latency_ms: list[float] = field(default_factory=list)
    failed: int = 0

    def row(self, name: str, baseline: Tally) -> dict:
        accuracy = self.right / self.asked if self.asked else 0.0
        base_accuracy = baseline.right / baseline.asked if baseline.asked else 0.0
        tokens = statistics.fmean(self.tokens) if self.tokens else 0.0
        latency = statistics.fmean(self.latency_ms) if self.latency_ms else 0.0
        base_tokens = statistics.fmean(baseline.tokens) if baseline.tokens else 0.0
        base_latency = statistics.fmean(baseline.latency_ms) if baseline.latency_ms else 0.0
        return {
            "mode": name, "accuracy": accuracy, "right": self.right, "asked": self.asked,
            "failed": self.failed, "mean_tokens": tokens,
            "cost_usd": self.cost_usd if self.cost_known else None,
            "mean_latency_ms": latency,
            "p50_latency_ms": statistics.median(self.latency_ms) if self.latency_ms else 0.0,
            "accuracy_minus_greedy": accuracy - base_accuracy,
            "tokens_x_greedy": tokens / base_tokens if base_tokens else None,
            "latency_x_greedy": latency / base_latency if base_latency else None,
        }


def configured_providers(settings: LlmSettings) -> list[str]:
    """The providers of the fallback order that can answer: a key (or a local URL); never
    offline."""
    ready = {"openai": settings.openai_api_key is not None,
             "anthropic": settings.anthropic_api_key is not None,
             "local": settings.local_base_url is not None}
    return [name for name in settings.fallback_order if ready.get(name, False)]


def reference(answer: str) -> str:
    return normalise_number(answer.rsplit("####", 1)[1].strip())


class Context:
    def __init__(self, deadline_s: float) -> None:
        self.deadline_s = deadline_s

    def time_remaining(self) -> float:
        return self.deadline_s


async def no_passages(problem, timeout_s: float) -> tuple:
    return ()


async def run(args, providers: list[str]) -> list[dict]:
    llm_settings = LlmSettings(port=0, fallback_order=providers, offline_enabled=False)
    servicers, ready = await build_llm(llm_settings)
    gateway = await start_server("llm", llm_settings, servicers, ready)
    mcts_settings = MctsSettings(port=0, neural_target="127.0.0.1:1")
    neural_channel = grpc.aio.insecure_channel("127.0.0.1:1")
    mcts_servicers, mcts_ready = await build_mcts(mcts_settings, neural_channel)
    mcts = await start_server("mcts", mcts_settings, mcts_servicers, mcts_ready)
    llm_channel = grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}")
    mcts_channel = grpc.aio.insecure_channel(f"127.0.0.1:{mcts.port}")
    llm = llm_service_pb2_grpc.LlmServiceStub(llm_channel)
    settings = OrchestratorSettings(text_max_iterations=1, max_answer_tokens=args.answer_tokens)
    servicer = OrchestratorServicer(
        settings, AgentSet(text=[LlmAgent(llm, settings.llm_deadline_s, args.answer_tokens)]),
        roles=RoleServices(llm=llm, retrieve=no_passages,
                           mcts=mcts_service_pb2_grpc.MctsServiceStub(mcts_channel),
                           llm_deadline_s=settings.llm_deadline_s))
    tallies = {mode: Tally() for mode in MODES}
    lines = DATA.read_text().splitlines()[: args.questions]
    try:
        for number, line in enumerate(lines, 1):
            item = json.loads(line)
            query, expected = item["question"] + INSTRUCTION, reference(item["answer"])
            for mode in MODES:
                await ask(mode, query, expected, tallies[mode], llm, servicer, args)
            if not args.json:
                print(f"\r{number}/{len(lines)} " + "  ".join(
                    f"{m} {t.right}/{t.asked}" for m, t in tallies.items()), end="",
                    file=sys.stderr, flush=True)
    finally:
        for channel in (llm_channel, mcts_channel, neural_channel):
            await channel.close()
        await gateway.stop(0)
        await mcts.stop(0)
    return [tallies[mode].row(mode, tallies["greedy"]) for mode in MODES]


async def ask(mode: str, query: str, expected: str, tally: Tally, llm, servicer, args) -> None:
    """One question in one mode, recorded in `tally` (a failed call counts as wrong)."""
    started = time.perf_counter()
    tally.asked += 1
    try:
        if mode == "greedy":
            reply = await llm.Generate(llm_service_pb2.GenerateRequest(
                prompt=query, max_tokens=args.answer_tokens, temperature=0.0), timeout=120)
            text, tokens = reply.text, reply.usage.prompt_tokens + reply.usage.completion_tokens
            cost = reply.cost_usd if reply.HasField("cost_usd") else None
        else:
            fields = ({"sample_count": args.samples} if mode == "self-consistency" else
                      {"mcts_iterations": args.simulations, "step_branching": args.branching,
                       "max_steps": args.max_steps})
            response = await servicer.AnswerQuery(pb.AnswerQueryRequest(query=query, **fields),
                                                  Context(600.0))
            text, tokens = response.answer, response.total_tokens
            cost = response.cost_usd if response.cost_known else None
    except Exception as error:  # noqa: BLE001 - a failed question is counted, the bench goes on
        tally.failed += 1
        print(f"\n{mode}: {type(error).__name__}: {error}", file=sys.stderr)
        return
    tally.latency_ms.append((time.perf_counter() - started) * 1e3)
    tally.tokens.append(tokens)
    if cost is None:
        tally.cost_known = False
    else:
        tally.cost_usd += cost
    tally.right += extract_answer(text) == expected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--samples", type=int, default=5, help="k of self-consistency")
    parser.add_argument("--simulations", type=int, default=20, help="mcts_iterations")
    parser.add_argument("--branching", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--answer-tokens", type=int, default=512)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes: a smoke run in seconds (make bench-quick)")
    args = parser.parse_args()
    if args.quick:
        args.questions, args.samples, args.simulations, args.max_steps = 2, 2, 2, 2
    providers = configured_providers(LlmSettings())
    if not providers:
        print("not measured: no key. No language-model provider is configured "
              "(LLM_OPENAI_API_KEY, LLM_ANTHROPIC_API_KEY or LLM_LOCAL_BASE_URL); the offline "
              "provider is extractive and cannot solve GSM8K.")
        print(f"{'mode':24} {'questions':>9}  accuracy")
        for mode in ("greedy", f"self-consistency k={args.samples}", "step search"):
            print(f"{mode:24} {0:>9}  not measured: no key")
        return 0
    rows = asyncio.run(run(args, providers))
    if args.json:
        print(json.dumps({"providers": providers, "load_average": os.getloadavg(),
                          "rows": rows}))
        return 0
    print(f"\nGSM8K test, first {args.questions} questions; providers {providers}; load "
          f"average {os.getloadavg()[0]:.2f}")
    print(f"{'mode':18} {'accuracy':>9} {'right':>9} {'failed':>6} {'tokens/q':>9} "
          f"{'cost USD':>10} {'mean ms':>9} {'p50 ms':>9} {'tok x':>6} {'ms x':>6}")
    for row in rows:
        cost = "unknown" if row["cost_usd"] is None else f"{row['cost_usd']:.4f}"
        tokens_x = "" if row["tokens_x_greedy"] is None else f"{row['tokens_x_greedy']:.2f}"
        latency_x = "" if row["latency_x_greedy"] is None else f"{row['latency_x_greedy']:.2f}"
        print(f"{row['mode']:18} {row['accuracy']:9.3f} {row['right']:>4}/{row['asked']:<4} "
              f"{row['failed']:6} {row['mean_tokens']:9.0f} {cost:>10} "
              f"{row['mean_latency_ms']:9.0f} {row['p50_latency_ms']:9.0f} {tokens_x:>6} "
              f"{latency_x:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
