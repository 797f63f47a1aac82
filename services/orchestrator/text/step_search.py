"""Search over reasoning steps (LATS, Zhou et al. 2023, arXiv:2310.04406; RAP, Hao et al. 2023,
arXiv:2305.14992) with the mcts service's tree: the orchestrator drives the `SearchExternal`
stream, the service's numba PUCT tree chooses which leaf to expand, and at each leaf the
language model proposes up to b next steps (`prompts.PROPOSE_STEPS`) and values each
(`prompts.EVALUATE_STEPS`, 0..10 scaled to [0, 1]).

A node is a partial trajectory (the root: no step yet); action i of a node is its i-th proposed
step (actions 0..b-1; a proposal the model did not make has prior 0, illegal). A leaf's answer to
the service:

- priors: each proposed step's value plus `PRIOR_FLOOR` (so a step valued 0 stays legal);
- value: the leaf's own step value v mapped to [-1, 1] as 2v - 1 (0 for the root); one player;
- terminal: the step states the final answer ("The answer is ..."), the trajectory has
  `max_steps` steps (no answer: value -1), or the model proposed nothing (value -1).

Where a step holds arithmetic, the checker (`arithmetic.check_step`, `ast`, never eval) evaluates
every equation; a step with a false one is worth 0 whatever the self-evaluation said.

The answer is the best complete trajectory among the leaves the tree reached: the highest final
step value, the first reached among equals; without any, the best partial one among the steps
proposed (highest value, deepest among equals), flagged incomplete. The request's budgets apply
to every call: when the next one would exceed either, the stream is cancelled, the answer is
chosen from what was reached, and the service's statistics are absent (the search did not end).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import grpc
from mesh.common.v1 import common_pb2
from mesh.mcts.v1 import mcts_service_pb2 as mcts_pb
from mesh.mcts.v1 import mcts_service_pb2_grpc

from libs.errors import DeadlineExceeded, propagate
from services.orchestrator.problems.arithmetic import check_step
from services.orchestrator.text import prompts
from services.orchestrator.text.query import Passage
from services.orchestrator.text.roles import (
    BudgetStop,
    LanguageModel,
    RoleOptions,
    RoleResult,
    TextRole,
)

PRIOR_FLOOR = 0.01
MAX_BRANCHING = 8
_STATES_ANSWER = re.compile(r"(?i)\bthe (?:final )?answer is\b|####|\\boxed\{")


@dataclass
class StepNode:
    """A proposed step (the root has none).

    Attributes:
        path: actions from the root.
        text: the step ("" for the root).
        value: in [0, 1]: the self-evaluation's score, 0 when the checker found a false equation
            (0.5 for the root: nothing known).
        checked: it held arithmetic and all of it was right.
        final: it states the final answer.
    """

    path: tuple[int, ...]
    text: str
    value: float
    checked: bool = False
    final: bool = False


@dataclass
class SearchOutcome:
    """What the search reached.

    Attributes:
        trajectory: the chosen steps, root's child first.
        complete: the trajectory ends with a final answer.
        statistics: the service's statistics; None when a budget stopped the search.
        leaves_evaluated: leaves answered to the service, the root included.
        steps_proposed: steps the model proposed in all.
        max_depth: deepest leaf answered, in steps.
    """

    trajectory: list[StepNode] = field(default_factory=list)
    complete: bool = False
    statistics: common_pb2.SearchStatistics | None = None
    leaves_evaluated: int = 0
    steps_proposed: int = 0
    max_depth: int = 0


class StepTree:
    """The orchestrator's side of the tree: every proposed step by its path, and the leaves
    answered, in order."""

    def __init__(self, branching: int, max_steps: int) -> None:
        self.branching = branching
        self.max_steps = max_steps
        self.nodes: dict[tuple[int, ...], StepNode] = {(): StepNode((), "", 0.5)}
        self.reached: list[tuple[int, ...]] = []
        self.proposed = 0

    def steps(self, path: tuple[int, ...]) -> list[str]:
        """The steps from the root to `path`."""
        return [self.nodes[path[:depth]].text for depth in range(1, len(path) + 1)]

    async def answer(self, model: LanguageModel, question: str, passages: tuple[Passage, ...],
                     path: tuple[int, ...]) -> mcts_pb.LeafEvaluation:
        """The evaluation of leaf `path` (see the module's docstring); asks the model unless the
        leaf is terminal.

        Raises:
            BudgetStop: and the errors of `LanguageModel.ask`.
        """
        node = self.nodes[path]
        if node.final or len(path) >= self.max_steps:
            self.reached.append(path)
            return mcts_pb.LeafEvaluation(value=2 * node.value - 1 if node.final else -1.0,
                                          terminal=True)
        children = await self._expand(model, question, passages, path)
        self.reached.append(path)
        if not children:
            return mcts_pb.LeafEvaluation(value=-1.0, terminal=True)
        priors = [0.0] * self.branching
        for action, child in enumerate(children):
            priors[action] = child.value + PRIOR_FLOOR
        return mcts_pb.LeafEvaluation(priors=priors, value=2 * node.value - 1 if path else 0.0)

    async def _expand(self, model: LanguageModel, question: str, passages: tuple[Passage, ...],
                      path: tuple[int, ...]) -> list[StepNode]:
        """The proposed children of `path`, valued and checked, stored in `nodes`."""
        steps = prompts.numbered(self.steps(path))
        proposed = prompts.parse_steps(await model.ask("propose", prompts.PROPOSE_STEPS.format(
            branching=self.branching, question=question, steps=steps), passages),
            self.branching)
        if not proposed:
            return []
        scores = prompts.parse_scores(await model.ask("evaluate", prompts.EVALUATE_STEPS.format(
            question=question, steps=steps, candidates=prompts.numbered(proposed))),
            len(proposed))
        children = []
        for action, (text, score) in enumerate(zip(proposed, scores, strict=True)):
            check = check_step(text)
            value = 0.0 if check.wrong or score is None else score
            child = StepNode(path + (action,), text, value, check.checked,
                             bool(_STATES_ANSWER.search(text)))
            self.nodes[child.path] = child
            children.append(child)
        self.proposed += len(children)
        return children

    def best(self) -> tuple[list[StepNode], bool]:
        """The chosen trajectory and whether it is complete (see the module's docstring)."""
        finals = [path for path in self.reached if path and self.nodes[path].final]
        if finals:
            chosen = max(finals, key=lambda p: self.nodes[p].value)  # first among equals
            return [self.nodes[chosen[:d]] for d in range(1, len(chosen) + 1)], True
        partial = [path for path in self.nodes if path]  # proposed, in order
        if not partial:
            return [], False
        chosen = max(partial, key=lambda p: (self.nodes[p].value, len(p)))
        return [self.nodes[chosen[:d]] for d in range(1, len(chosen) + 1)], False


def search_settings(options: RoleOptions) -> mcts_pb.SearchExternalRequest:
    """The stream's first request: b actions, the request's simulations, one leaf per batch (the
    model is asked leaf by leaf, in the tree's order), one player, PUCT."""
    return mcts_pb.SearchExternalRequest(settings=mcts_pb.ExternalSearchSettings(
        num_actions=options.branching, simulations=options.simulations, batch_size=1,
        players=1, rule=mcts_pb.SELECTION_RULE_PUCT))


async def search_steps(model: LanguageModel, mcts: mcts_service_pb2_grpc.MctsServiceStub,
                       question: str, passages: tuple[Passage, ...], options: RoleOptions,
                       deadline: float) -> RoleResult:
    """Runs the search for `question` before `deadline` (`time.monotonic()`); the result's
    `search` is the `SearchOutcome`, its answer the chosen trajectory's steps, one per line, its
    confidence the last step's value.

    Raises:
        DeadlineExceeded: no time left, or the stream ran past it.
        Unavailable: the mcts service is down or failed the stream.
        the errors of `LanguageModel.ask` (BudgetStop excepted).
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceeded("mcts: no time left for a search over steps")
    tree = StepTree(options.branching, options.max_steps)
    outcome = SearchOutcome()
    call = mcts.SearchExternal(timeout=remaining)
    stop_reason = ""
    try:
        await call.write(search_settings(options))
        while True:
            response = await call.read()
            if response == grpc.aio.EOF:
                raise DeadlineExceeded("mcts: the search stream ended without a result")
            if response.WhichOneof("message") == "result":
                outcome.statistics = response.result.statistics
                break
            leaves = [await tree.answer(model, question, passages, tuple(leaf.path))
                      for leaf in response.batch.leaves]
            await call.write(mcts_pb.SearchExternalRequest(evaluations=mcts_pb.LeafEvaluations(
                batch_id=response.batch.batch_id, leaves=leaves)))
        await call.done_writing()
        stats = outcome.statistics
        stop_reason = (f"search finished: {stats.simulations} simulation(s), "
                       f"{len(tree.reached)} leaf(s) evaluated")
    except BudgetStop as stop:
        call.cancel()
        stop_reason = f"{stop.reason}; the search stopped after {len(tree.reached)} leaf(s)"
    except grpc.aio.AioRpcError as error:
        raise propagate(error, "mcts") from error
    except BaseException:
        call.cancel()
        raise
    outcome.trajectory, outcome.complete = tree.best()
    outcome.leaves_evaluated = len(tree.reached)
    outcome.steps_proposed = tree.proposed
    outcome.max_depth = max((len(path) for path in tree.reached), default=0)
    if not outcome.complete:
        stop_reason += "; no trajectory reached a final answer"
    answer = "\n".join(node.text for node in outcome.trajectory)
    confidence = outcome.trajectory[-1].value if outcome.trajectory else 0.0
    return RoleResult(TextRole.SEARCH, answer, confidence, stop_reason, search=outcome)
