"""A text query for the consensus loop: retrieved passages as context, drafts as proposals, and the
synthesis of the answer with its sources."""

from __future__ import annotations

from dataclasses import dataclass

from services.orchestrator.loop.types import AgentName, Proposal, Tally

MAX_QUERY_CHARS = 10_000


@dataclass(frozen=True)
class TextProblem:
    """Answer `query` from the `top_k` best passages of `collection`, retrieved with
    `search_mode` and `fusion` (mesh.common.v1.SearchMode / FusionMethod values; 0: the
    retrieval service's default, hybrid with DBSF). `collection_named`: the request named the
    collection (False: the default one, which may not exist yet on a fresh mesh).
    `answer_tokens`: most tokens a draft may generate (None: the agent's setting)."""

    query: str
    collection: str
    top_k: int
    search_mode: int = 0
    fusion: int = 0
    collection_named: bool = True
    answer_tokens: int | None = None

    @property
    def query_length_norm(self) -> float:
        """Characters over the 10,000 allowed, in [0, 1] (routing feature 8)."""
        return min(1.0, len(self.query) / MAX_QUERY_CHARS)


@dataclass(frozen=True)
class Passage:
    """A retrieved passage: `score` is the retrieval score (cosine similarity for dense search,
    BM25 for sparse, the fused score for hybrid); `cosine_similarity` is the cosine of its dense
    vector to the query's in [-1, 1] whatever the mode (None from a retrieval service that does
    not report it)."""

    document_id: str
    title: str
    text: str
    score: float
    source: str
    cosine_similarity: float | None = None


@dataclass(frozen=True)
class Draft:
    """A drafted answer and who wrote it (`offline`: the extractive offline provider), with the
    tokens the gateway reported for it and its cost in US dollars (None: the model has no
    price; a draft that stands for a self-consistency vote carries none: the vote counts them)."""

    text: str
    provider: str
    model: str
    offline: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    finish_reason: str = ""
    """Why the draft's text ended, as the gateway reported it ("stop", "length", ...)."""


@dataclass(frozen=True)
class NoDefaultCollection:
    """The retrieval agent's detail when the request named no collection and the default one
    does not exist (a fresh mesh): no passages, and the answer says it is ungrounded. Falsy, so
    the loop adds nothing to the context."""

    collection: str

    def __bool__(self) -> bool:
        return False


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
    draft: Draft | None = None
    """The winning draft (its tokens and cost); None when passages_only."""


def grounding_confidence(passages: tuple[Passage, ...]) -> float:
    """Confidence of a single draft, in [0, 1]: the highest cosine similarity of a passage to the
    query, negative cosines counted as 0. One draft has no agreement to measure; how close its
    passages are to the query is what is known. Not the retrieval score: BM25 and fused scores
    have no fixed range (a DBSF sum reaches about 2), so clipping them would read 1 for most
    answers. 0 without passages, or when none carries a cosine (a retrieval service that does not
    report it: nothing is known)."""
    cosines = [p.cosine_similarity for p in passages if p.cosine_similarity is not None]
    if not cosines:
        return 0.0
    return max(0.0, min(1.0, max(cosines)))


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
            return TextAnswer(draft.text, passages, draft.provider, draft.offline, draft=draft)
    raise ValueError("the winning answer is not a draft of the LLM agent")


def synthesize_passages(tally: Tally, proposals: dict[AgentName, Proposal],
                        context: tuple = ()) -> TextAnswer:
    """The answer when no draft came (the consensus loop's fallback): the retrieved passages
    alone, flagged `passages_only`, with no text and no provider."""
    passages = tuple(p for p in context if isinstance(p, Passage))
    return TextAnswer("", passages, "", False, passages_only=True)
