"""The tally of the consensus loop: the newest vote of each agent, weighted by confidence."""

from __future__ import annotations

from collections.abc import Sequence

from services.orchestrator.loop.types import AgentName, Tally, Vote


def aggregate(votes: Sequence[Vote], excluded: frozenset[str] = frozenset(),
              weights: dict[AgentName, float] | None = None) -> Tally:
    """Tallies votes (the newest per agent): a verified vote wins; otherwise weighted voting, where
    each vote adds `weight(agent) * confidence` to its answer.

    Votes for an `excluded` answer are set aside unless every vote is for one. Ties go to the answer
    voted first. `weights` default to 1.0 per agent.

    Raises:
        ValueError: no votes.
    """
    if not votes:
        raise ValueError("aggregate needs at least one vote")
    weights = weights or {}
    counted = [vote for vote in votes if vote.answer not in excluded] or list(votes)
    for vote in counted:
        if vote.verified:
            agreed = all(other.answer == vote.answer for other in counted)
            return Tally(vote.answer, 1.0, _support_share(counted, vote.answer, weights), agreed,
                         True)
    support: dict[str, float] = {}
    for vote in counted:
        support[vote.answer] = support.get(vote.answer, 0.0) + _weighted(vote, weights)
    answer = max(support, key=lambda key: support[key])  # first voted wins ties (dict order)
    total_weight = sum(weights.get(vote.agent, 1.0) for vote in counted)
    confidence = support[answer] / total_weight if total_weight > 0 else 0.0
    return Tally(
        answer=answer,
        confidence=min(1.0, max(0.0, confidence)),
        consensus_score=_support_share(counted, answer, weights),
        agreed=len(support) == 1,
        verified=False,
    )


def _weighted(vote: Vote, weights: dict[AgentName, float]) -> float:
    return weights.get(vote.agent, 1.0) * vote.confidence


def _support_share(votes: Sequence[Vote], answer: str, weights: dict[AgentName, float]) -> float:
    total = sum(_weighted(vote, weights) for vote in votes)
    if total <= 0:
        return sum(vote.answer == answer for vote in votes) / len(votes)
    return sum(_weighted(vote, weights) for vote in votes if vote.answer == answer) / total
