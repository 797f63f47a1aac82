"""The confidence of a single draft is its passages' cosine similarity to the query, not their
retrieval scores (BM25 and fused scores have no fixed range)."""

from __future__ import annotations

import pytest
from mesh.retrieval.v1 import retrieval_service_pb2 as rpb

from services.orchestrator.agents.retrieval import search_passages
from services.orchestrator.text.query import Passage, TextProblem, grounding_confidence


def passage(score: float, cosine: float | None) -> Passage:
    return Passage("d", "t", "text", score, "s", cosine_similarity=cosine)


@pytest.mark.parametrize(("passages", "expected"), [
    ((), 0.0),
    # A DBSF sum of 1.9 used to clip to 1.0; the cosines say 0.5 at best.
    ((passage(1.9, 0.25), passage(1.2, 0.5)), 0.5),
    ((passage(0.1, -0.25),), 0.0),  # a negative cosine is no grounding
    ((passage(12.5, None), passage(3.0, 0.375)), 0.375),  # a passage without a cosine is skipped
    ((passage(12.5, None),), 0.0),  # a retrieval service that does not report cosines
    ((passage(0.9, 1.0),), 1.0),
])
def test_grounding_confidence_is_the_best_cosine(passages, expected):
    assert grounding_confidence(passages) == expected


class Stub:
    def __init__(self, response: rpb.SearchDocumentsResponse) -> None:
        self.response = response

    async def SearchDocuments(self, request, timeout):
        return self.response


async def test_passages_carry_the_cosine_when_the_service_reports_it():
    response = rpb.SearchDocumentsResponse(results=[
        rpb.SearchResult(document_id="a", score=1.75, cosine_similarity=0.5),
        rpb.SearchResult(document_id="b", score=0.5)])  # an older service leaves it unset
    passages = await search_passages(Stub(response), TextProblem("q", "c", 2), 1.0)
    assert [(p.document_id, p.score, p.cosine_similarity) for p in passages] == [
        ("a", 1.75, 0.5), ("b", 0.5, None)]
    assert grounding_confidence(passages) == 0.5
