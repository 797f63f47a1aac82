"""A text query for the consensus loop: retrieved passages as context, drafts as proposals, and the
synthesis of the answer with its sources."""

from __future__ import annotations

from dataclasses import dataclass

from services.orchestrator.consensus import Proposal, Tally
from services.orchestrator.routing import AgentName

MAX_QUERY_CHARS = 10_000


@dataclass(frozen=True)
class TextProblem:
    """Answer `query` from the `top_k` best passages of `collection`."""

    query: str
    collection: str
    top_k: int

    @property
    def query_length_norm(self) -> float:
        """Characters over the 10,000 allowed, in [0, 1] (routing feature 8)."""
        return min(1.0, len(self.query) / MAX_QUERY_CHARS)


@dataclass(frozen=True)
class Passage:
    """A retrieved passage: `score` is the cosine similarity to the query."""

    document_id: str
    title: str
    text: str
    score: float
    source: str


@dataclass(frozen=True)
class Draft:
    """A drafted answer and who wrote it (`offline`: the extractive offline provider)."""

    text: str
    provider: str
    model: str
    offline: bool


@dataclass(frozen=True)
class TextAnswer:
    """The loop's answer to a text query: the text, the passages it was grounded in (best first),
    and the provider that drafted it. `passages_only`: no draft could be written (the LLM failed
    or did not answer in time), so `answer` is empty and the passages are the whole answer."""

    answer: str
    sources: tuple[Passage, ...]
    provider: str
    offline: bool
    passages_only: bool = False


def grounding_confidence(passages: tuple[Passage, ...]) -> float:
    """Confidence of a single draft: the best passage's cosine similarity clipped to [0, 1] (0
    without passages). One draft has no agreement to measure; its grounding is what is known."""
    if not passages:
        return 0.0
    return max(0.0, min(1.0, max(passage.score for passage in passages)))


def synthesize_text(tally: Tally, proposals: dict[AgentName, Proposal],
                    context: tuple = ()) -> TextAnswer:
    """The draft that won the tally with the retrieved passages as its sources.

    Raises:
        ValueError: the winning answer is not a draft (a bug: only the LLM agent votes drafts).
    """
    for proposal in proposals.values():
        if proposal.answer == tally.answer and isinstance(proposal.detail, Draft):
            draft = proposal.detail
            passages = tuple(p for p in context if isinstance(p, Passage))
            return TextAnswer(draft.text, passages, draft.provider, draft.offline)
    raise ValueError("the winning answer is not a draft of the LLM agent")


def synthesize_passages(tally: Tally, proposals: dict[AgentName, Proposal],
                        context: tuple = ()) -> TextAnswer:
    """The answer when no draft came (the consensus loop's fallback): the retrieved passages
    alone, flagged `passages_only`, with no text and no provider."""
    passages = tuple(p for p in context if isinstance(p, Passage))
    return TextAnswer("", passages, "", False, passages_only=True)
