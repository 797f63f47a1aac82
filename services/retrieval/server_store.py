"""`ServerStore`: the `VectorStore` on a Qdrant server through `qdrant-client`.

Selected when `RETRIEVAL_QDRANT_URL` is set. Tests pass `QdrantClient(":memory:")`, qdrant-client's
in-process double of the server API (a test double only: it ignores payload indexes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from qdrant_client import QdrantClient, models

from libs.errors import FailedPrecondition, NotFound, Unavailable
from services.retrieval.store import (
    DENSE_ONLY,
    DENSE_VECTOR,
    HEAD_KIND,
    KEYWORD_INDEXES,
    KIND_KEY,
    RRF_K,
    SEARCH_MODES,
    SEQ_KEY,
    SERVED_KEYS,
    SPARSE_VECTOR,
    VERSION_KEY,
    ChunkRecord,
    CollectionInfo,
    DocumentHead,
    FusionMethod,
    Hit,
    SearchMode,
    SparseVector,
    check_collection_name,
    check_mode,
    head_point_id,
    hit_cosines,
    point_id,
)

MIN_SERVER_VERSION = (1, 16)
"""The first Qdrant release with conditional upserts (`update_filter`), which commit_heads uses."""


def _sparse(sparse: SparseVector | None) -> models.SparseVector:
    if sparse is None:
        raise FailedPrecondition("a sparse or hybrid search needs the query's BM25 vector")
    return models.SparseVector(indices=sparse.indices, values=sparse.values)


def _match(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _server_filter(filter: Mapping[str, str] | None,
                   versions: Sequence[str] | None = None) -> models.Filter | None:
    """As `edge_store._edge_filter`."""
    filter = dict(filter or {})
    if versions is None:
        return models.Filter(must=[_match(k, v) for k, v in sorted(filter.items())]) \
            if filter else None
    legacy = [_match(k, filter.pop(k)) for k in ("source", "title") if k in filter]
    return models.Filter(
        must=[_match(k, v) for k, v in sorted(filter.items())],
        should=[models.FieldCondition(key=VERSION_KEY, match=models.MatchAny(any=list(versions))),
                models.Filter(must=[models.IsEmptyCondition(
                    is_empty=models.PayloadField(key=VERSION_KEY)), *legacy])])


_NOT_HEAD = models.Filter(must_not=[_match(KIND_KEY, HEAD_KIND)])


def _heads_filter(filter: Mapping[str, str] | None) -> models.Filter:
    """Heads (whose payload equals each value of `filter`)."""
    return models.Filter(must=[_match(KIND_KEY, HEAD_KIND),
                        *[_match(k, v) for k, v in sorted((filter or {}).items())]])


def _of_documents(document_ids: Sequence[str]) -> models.FieldCondition:
    return models.FieldCondition(key="document_id", match=models.MatchAny(any=list(document_ids)))


def _lower_seq(seq: int) -> models.Filter:
    return models.Filter(must=[models.FieldCondition(key=SEQ_KEY, range=models.Range(lt=seq))])


def _stale_of(head: DocumentHead) -> models.Filter:
    return models.Filter(must=[_match("document_id", head.document_id)],
                         must_not=[models.FieldCondition(key=SEQ_KEY,
                                                         range=models.Range(gt=head.seq)),
                                   _match(VERSION_KEY, head.version)])


class ServerStore:
    """The `VectorStore` behind a `QdrantClient` (thread-safe as the client is). Writes wait for
    the server to apply them (`wait=True`), so a search right after an upsert sees it."""

    def __init__(self, client: QdrantClient) -> None:
        self._client = client
        self._modes: dict[str, frozenset[str]] = {}
        self._indexed: set[str] = set()
        self._version_checked = False

    def ensure_collection(self, name: str, dim: int) -> None:
        """Creates the collection unless it exists (see `VectorStore`), first checking once that
        the server has conditional upserts.

        Raises:
            FailedPrecondition: the server is older than MIN_SERVER_VERSION.
        """
        check_collection_name(name)
        self._check_version()
        if not self._client.collection_exists(name):
            try:
                self._create(name, dim)
            except Exception:  # noqa: BLE001 - another replica may have created it meanwhile
                if not self._client.collection_exists(name):
                    raise
        size = self._dim(name)
        if size != dim:
            raise FailedPrecondition(f"collection {name!r} holds {size}-d vectors, not {dim}-d")
        if name not in self._indexed:  # once per process: one made before heads lacks some
            for key in KEYWORD_INDEXES:
                self._client.create_payload_index(name, key, models.PayloadSchemaType.KEYWORD)
            self._client.create_payload_index(name, SEQ_KEY, models.PayloadSchemaType.INTEGER)
            self._indexed.add(name)

    def _check_version(self) -> None:
        if self._version_checked:
            return
        version = self._client.info().version
        parts = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
        if parts < MIN_SERVER_VERSION:
            raise FailedPrecondition(
                f"the Qdrant server is {version}; ingest needs "
                f"{'.'.join(map(str, MIN_SERVER_VERSION))} or later (conditional upserts of "
                "document heads)")
        self._version_checked = True

    def _create(self, name: str, dim: int) -> None:
        self._client.create_collection(
            name,
            # Half-precision storage, as the embedded store (see edge_store.DENSE_DATATYPE).
            vectors_config={DENSE_VECTOR: models.VectorParams(
                size=dim, distance=models.Distance.COSINE, datatype=models.Datatype.FLOAT16)},
            sparse_vectors_config={
                SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )

    def upsert(self, collection: str, chunks: Sequence[ChunkRecord], vectors: np.ndarray,
               sparse: Sequence[SparseVector] | None = None,
               heads: Sequence[DocumentHead] = ()) -> None:
        if heads and len({head.seq for head in heads}) > 1:
            raise FailedPrecondition("heads written with chunks must share one seq")
        named = self.modes(collection) != DENSE_ONLY
        if sparse is not None and len(sparse) != len(chunks):
            raise FailedPrecondition(f"{len(sparse)} sparse vectors for {len(chunks)} chunks")
        points = []
        for index, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
            if not named:
                vector_data = vector.tolist()
            elif sparse is None:  # no sparse vector: the chunk serves dense search only
                vector_data = {DENSE_VECTOR: vector.tolist()}
            else:
                vector_data = {DENSE_VECTOR: vector.tolist(),
                               SPARSE_VECTOR: models.SparseVector(
                                   indices=sparse[index].indices, values=sparse[index].values)}
            points.append(models.PointStruct(
                id=point_id(collection, chunk.document_id, chunk.chunk_index, chunk.version),
                vector=vector_data, payload=chunk.payload()))
        points.extend(models.PointStruct(id=head_point_id(collection, h.document_id), vector={},
                                         payload=h.payload()) for h in heads)
        if points:  # chunks are new points: the condition only decides over existing heads
            self._client.upsert(collection, points=points, wait=True,
                                update_filter=_lower_seq(heads[0].seq) if heads else None)

    def delete_document(self, collection: str, document_id: str) -> None:
        self._require(collection)
        self._client.delete(
            collection,
            points_selector=models.FilterSelector(
                filter=_server_filter({"document_id": document_id})),
            wait=True,
        )

    def search(self, collection: str, vector: np.ndarray | None, top_k: int,
               filter: Mapping[str, str] | None = None,
               min_score: float | None = None, *, sparse: SparseVector | None = None,
               mode: SearchMode = "dense", fusion: FusionMethod = "dbsf",
               prefetch_limit: int = 100, versions: Sequence[str] | None = None) -> list[Hit]:
        modes = self.modes(collection)
        check_mode(collection, mode, modes)
        server_filter = _server_filter(filter, versions)
        if mode == "sparse" and sparse is not None and not sparse.indices:
            return []  # the query has no indexed term (only stopwords or punctuation)
        prefetch = None
        using = None
        if mode == "dense":
            query = vector.tolist()
            using = None if modes == DENSE_ONLY else DENSE_VECTOR
        elif mode == "sparse":
            query, using = _sparse(sparse), SPARSE_VECTOR
        else:
            limit = max(prefetch_limit, top_k)
            prefetch = [models.Prefetch(query=vector.tolist(), using=DENSE_VECTOR,
                                        filter=server_filter, limit=limit)]
            if sparse is not None and sparse.indices:
                prefetch.append(models.Prefetch(query=_sparse(sparse), using=SPARSE_VECTOR,
                                                filter=server_filter, limit=limit))
            query = (models.FusionQuery(fusion=models.Fusion.DBSF) if fusion == "dbsf"
                     else models.RrfQuery(rrf=models.Rrf(k=RRF_K)))
        # Dense scores are the cosines; other modes read each hit's dense vector back to get it.
        with_vectors = [DENSE_VECTOR] if mode != "dense" and vector is not None else False
        response = self._client.query_points(
            collection, query=query, using=using, prefetch=prefetch,
            query_filter=server_filter, limit=top_k, score_threshold=min_score,
            with_payload=True, with_vectors=with_vectors,
        )
        points = response.points
        cosines = hit_cosines(
            mode, vector if with_vectors else None, [p.score for p in points],
            lambda: (np.asarray([p.vector[DENSE_VECTOR] for p in points], dtype=np.float32)
                     @ vector).tolist())
        return [Hit.from_payload(str(point.id), point.score, point.payload, cosine)
                for point, cosine in zip(points, cosines, strict=True)]

    def modes(self, collection: str) -> frozenset[str]:
        cached = self._modes.get(collection)
        if cached is not None:
            return cached
        self._require(collection)
        params = self._client.get_collection(collection).config.params
        if (isinstance(params.vectors, dict) and DENSE_VECTOR in params.vectors
                and SPARSE_VECTOR in (params.sparse_vectors or {})):
            modes = frozenset(SEARCH_MODES)
        else:
            modes = DENSE_ONLY
        self._modes[collection] = modes
        return modes

    def fingerprints(self, collection: str, document_ids: Sequence[str]) -> dict[str, str]:
        self._require(collection)
        if not document_ids:
            return {}
        records = self._client.retrieve(
            collection, ids=[point_id(collection, d, 0) for d in document_ids],
            with_payload=True, with_vectors=False)
        return {r.payload["document_id"]: r.payload.get("fingerprint", "") for r in records}

    def heads(self, collection: str, document_ids: Sequence[str],
              served_only: bool = False) -> dict[str, DocumentHead]:
        self._require(collection)
        if not document_ids:
            return {}
        selected = SERVED_KEYS if served_only else True
        found = {r.payload["document_id"]: DocumentHead.from_payload(r.payload)
                 for r in self._client.retrieve(
                     collection, ids=[head_point_id(collection, d) for d in document_ids],
                     with_payload=selected, with_vectors=False)}
        rest = [d for d in document_ids if d not in found]
        if rest:  # documents written before heads: their first chunk's payload
            found.update({r.payload["document_id"]: DocumentHead.from_payload(r.payload)
                          for r in self._client.retrieve(
                              collection, ids=[point_id(collection, d, 0) for d in rest],
                              with_payload=selected, with_vectors=False)})
        return found

    def commit_heads(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        for seq in sorted({head.seq for head in heads}):
            self._client.upsert(
                collection, wait=True,
                points=[models.PointStruct(id=head_point_id(collection, h.document_id),
                                           vector={}, payload=h.payload())
                        for h in heads if h.seq == seq],
                update_filter=_lower_seq(seq))

    def max_seq(self, collection: str, document_ids: Sequence[str]) -> int:
        if not document_ids:
            return 0
        records, _ = self._client.scroll(
            collection, scroll_filter=models.Filter(must=[_of_documents(document_ids)]),
            limit=1, order_by=models.OrderBy(key=SEQ_KEY, direction=models.Direction.DESC),
            with_payload=[SEQ_KEY])
        return int(records[0].payload[SEQ_KEY]) if records else 0

    def version_counts(self, collection: str, versions: Sequence[str]) -> dict[str, int]:
        return self._facet(collection, VERSION_KEY, versions, _NOT_HEAD)

    def point_counts(self, collection: str, document_ids: Sequence[str]) -> dict[str, int]:
        return self._facet(collection, "document_id", document_ids, None)

    def remove_stale(self, collection: str, heads: Sequence[DocumentHead]) -> None:
        if heads:
            self._client.delete(collection, wait=True, points_selector=models.FilterSelector(
                filter=models.Filter(should=[_stale_of(head) for head in heads])))

    def delete_versions(self, collection: str, document_id: str, up_to_seq: int) -> None:
        self._client.delete(collection, wait=True, points_selector=models.FilterSelector(
            filter=models.Filter(
                must=[_match("document_id", document_id)],
                must_not=[models.FieldCondition(key=SEQ_KEY, range=models.Range(gt=up_to_seq))])))

    def list_heads(self, collection: str, page_size: int, offset: str | None,
                   filter: Mapping[str, str] | None = None
                   ) -> tuple[list[DocumentHead], str | None]:
        self._require(collection)
        records, next_offset = self._client.scroll(
            collection, scroll_filter=_heads_filter(filter),
            limit=page_size, offset=offset, with_payload=True, with_vectors=False)
        return ([DocumentHead.from_payload(r.payload) for r in records],
                None if next_offset is None else str(next_offset))

    def document_count(self, collection: str) -> int:
        self._require(collection)
        return self._client.count(collection, exact=True, count_filter=_heads_filter(None)).count

    def delete_collection(self, name: str) -> None:
        self._require(name)
        self._client.delete_collection(name)
        self._modes.pop(name, None)
        self._indexed.discard(name)

    def _facet(self, collection: str, key: str, values: Sequence[str],
               extra: models.Filter | None) -> dict[str, int]:
        if not values:
            return {}
        must: list = [models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))]
        if extra is not None:
            must.append(extra)
        response = self._client.facet(collection, key=key, limit=len(values), exact=True,
                                      facet_filter=models.Filter(must=must))
        return {str(hit.value): hit.count for hit in response.hits}

    def list_collections(self) -> list[CollectionInfo]:
        names = sorted(c.name for c in self._client.get_collections().collections)
        return [CollectionInfo(name, self._dim(name), self.count(name)) for name in names]

    def count(self, collection: str) -> int:
        self._require(collection)
        return self._client.count(collection, exact=True, count_filter=_NOT_HEAD).count

    def close(self) -> None:
        self._client.close()

    def check(self) -> None:
        try:
            self._client.get_collections()
        except Exception as error:  # noqa: BLE001 - any failure to answer means unreachable
            raise Unavailable(f"cannot reach the Qdrant server: {type(error).__name__}: "
                              f"{error}") from error

    def _dim(self, name: str) -> int:
        vectors = self._client.get_collection(name).config.params.vectors
        if isinstance(vectors, dict) and DENSE_VECTOR in vectors:
            return vectors[DENSE_VECTOR].size
        if not isinstance(vectors, models.VectorParams):
            raise FailedPrecondition(f"collection {name!r} has no {DENSE_VECTOR!r} vector")
        return vectors.size

    def _require(self, collection: str) -> None:
        if not self._client.collection_exists(collection):
            raise NotFound(f"collection {collection!r} does not exist")
