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
    retrieval service's default, hybrid with DBSF)."""

    query: str
    collection: str
    top_k: int
    search_mode: int = 0
    fusion: int = 0

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
            return TextAnswer(draft.text, passages, draft.provider, draft.offline)
    raise ValueError("the winning answer is not a draft of the LLM agent")


def synthesize_passages(tally: Tally, proposals: dict[AgentName, Proposal],
                        context: tuple = ()) -> TextAnswer:
    """The answer when no draft came (the consensus loop's fallback): the retrieved passages
    alone, flagged `passages_only`, with no text and no provider."""
    passages = tuple(p for p in context if isinstance(p, Passage))
    return TextAnswer("", passages, "", False, passages_only=True)
