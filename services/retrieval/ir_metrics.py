"""Ranking metrics for retrieval evaluation, as trec_eval / pytrec_eval compute them.

`ndcg_at_k` is trec_eval's `ndcg_cut.k`: DCG = sum over ranks r = 1..k of gain / log2(r + 1), with
the judged relevance as the gain, divided by the DCG of the ideal ranking of all judged documents.
`recall_at_k` is `recall.k`: relevant documents in the top k over all relevant documents. Both are
averaged over the queries that have at least one relevant judgement (BEIR, MTEB). Reference:
Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR techniques" (TOIS 2002).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]
"""query id -> document id -> relevance grade (0 means judged not relevant)."""


def ndcg_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    """nDCG@k of one ranked list of document ids (best first) against one query's judgements."""
    dcg = sum(judgements.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(ranking[:k]))
    ideal = sorted((grade for grade in judgements.values() if grade > 0), reverse=True)[:k]
    idcg = sum(grade / math.log2(rank + 2) for rank, grade in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    """Share of the query's relevant documents found in the top k of `ranking`."""
    relevant = {doc for doc, grade in judgements.items() if grade > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mean_over_queries(metric, rankings: Mapping[str, Sequence[str]], qrels: Qrels,
                      k: int) -> float:
    """Mean of `metric(ranking, judgements, k)` over the judged queries with a relevant document.

    A judged query missing from `rankings` counts as an empty ranking (score 0).
    """
    queries = [q for q, judged in qrels.items() if any(grade > 0 for grade in judged.values())]
    if not queries:
        raise ValueError("no query has a relevant judgement")
    return sum(metric(rankings.get(q, []), qrels[q], k) for q in queries) / len(queries)
