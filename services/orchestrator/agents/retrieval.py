"""The retrieval agent: a client of mesh.retrieval.v1.RetrievalService. In a text query it is a
CONTEXT agent: it runs once, before routing, and its passages ground the drafts."""

from __future__ import annotations

import grpc
from mesh.retrieval.v1 import retrieval_service_pb2, retrieval_service_pb2_grpc

from libs.errors import DeadlineExceeded, NotFound, propagate
from services.orchestrator.loop.types import AgentName, Proposal, Role, Round
from services.orchestrator.text.query import (
    NoDefaultCollection,
    Passage,
    TextProblem,
    grounding_confidence,
)


class RetrievalAgent:
    """Searches the problem's collection for its query.

    Args:
        stub: a RetrievalService stub over a channel from `libs.channels.open_channel`.
        deadline_s: deadline of one call in seconds; the round's deadline shortens it.

    Attributes:
        default_missing: the latest search of the default collection (no collection named)
            found it missing. A hint only, for starting an ungrounded draft beside the search
            (`api.answer_stream.prestart_draft`): every request still searches, and the search
            decides; the next search that finds the collection clears it.
    """

    name = AgentName.RETRIEVAL
    role = Role.CONTEXT
    repeatable = False

    def __init__(self, stub: retrieval_service_pb2_grpc.RetrievalServiceStub,
                 deadline_s: float) -> None:
        self._stub = stub
        self._deadline_s = deadline_s
        self.default_missing = False

    async def propose(self, round_: Round) -> Proposal:
        """The best document's id as the answer (None when nothing matched), confidence the best
        passage's cosine similarity to the query (`grounding_confidence`), `detail` the passages
        (tuple of `Passage`, best first).

        Raises:
            DeadlineExceeded: no time left, or the call ran past its deadline.
            NotFound: the collection the request named does not exist (the default one, not
                named, answers no passages: `detail` is a NoDefaultCollection).
            Unavailable: the retrieval service is down or failed.
        """
        problem: TextProblem = round_.problem
        timeout = min(self._deadline_s, round_.remaining_s())
        if timeout <= 0:
            raise DeadlineExceeded("retrieval: no time left for a search")
        try:
            passages = await search_passages(self._stub, problem, timeout)
            if not problem.collection_named:
                self.default_missing = False
        except NotFound:
            if problem.collection_named:
                raise
            self.default_missing = True
            return Proposal(None, 0.0, f"the default collection {problem.collection!r} does not "
                            "exist yet (nothing ingested): no passages",
                            detail=NoDefaultCollection(problem.collection))
        if not passages:
            return Proposal(None, 0.0, f"no passage of {problem.collection!r} matched",
                            detail=())
        best = passages[0]
        return Proposal(best.document_id, grounding_confidence(passages),
                        f"{len(passages)} passage(s) from {problem.collection!r}, "
                        f"best {best.score:.2f}", detail=passages)


async def search_passages(stub: retrieval_service_pb2_grpc.RetrievalServiceStub,
                          problem: TextProblem, timeout_s: float) -> tuple[Passage, ...]:
    """The `problem.top_k` best passages of `problem.collection` for `problem.query`, best first
    (empty when nothing matched); used by the agent and by the decompose role's sub-questions.

    Raises:
        DeadlineExceeded, NotFound, Unavailable: as `RetrievalAgent.propose`.
    """
    request = retrieval_service_pb2.SearchDocumentsRequest(
        collection=problem.collection, query=problem.query, top_k=problem.top_k,
        mode=problem.search_mode, fusion=problem.fusion)
    try:
        response = await stub.SearchDocuments(request, timeout=timeout_s)
    except grpc.aio.AioRpcError as error:
        raise propagate(error, "retrieval") from error
    return tuple(
        Passage(document_id=r.document_id, title=r.title, text=r.text, score=float(r.score),
                source=r.source,
                cosine_similarity=(float(r.cosine_similarity)
                                   if r.HasField("cosine_similarity") else None))
        for r in response.results
    )
