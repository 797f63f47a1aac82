import datetime

from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mesh.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Document(_message.Message):
    __slots__ = ("name", "document_id", "title", "source", "chunk_count", "version", "fingerprint", "update_time")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    name: str
    document_id: str
    title: str
    source: str
    chunk_count: int
    version: str
    fingerprint: str
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., document_id: _Optional[str] = ..., title: _Optional[str] = ..., source: _Optional[str] = ..., chunk_count: _Optional[int] = ..., version: _Optional[str] = ..., fingerprint: _Optional[str] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListDocumentsRequest(_message.Message):
    __slots__ = ("parent", "page_size", "page_token")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    parent: str
    page_size: int
    page_token: str
    def __init__(self, parent: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListDocumentsResponse(_message.Message):
    __slots__ = ("documents", "next_page_token")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    next_page_token: str
    def __init__(self, documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteCollectionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class IngestDocumentsRequest(_message.Message):
    __slots__ = ("collection", "documents")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    documents: _containers.RepeatedCompositeFieldContainer[_common_pb2.Document]
    def __init__(self, collection: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[_common_pb2.Document, _Mapping]]] = ...) -> None: ...

class IngestDocumentsResponse(_message.Message):
    __slots__ = ("document_count", "chunk_count", "skipped_document_count", "updated_document_count")
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    document_count: int
    chunk_count: int
    skipped_document_count: int
    updated_document_count: int
    def __init__(self, document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., skipped_document_count: _Optional[int] = ..., updated_document_count: _Optional[int] = ...) -> None: ...

class StreamIngestDocumentsRequest(_message.Message):
    __slots__ = ("collection", "documents")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    documents: _containers.RepeatedCompositeFieldContainer[_common_pb2.Document]
    def __init__(self, collection: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[_common_pb2.Document, _Mapping]]] = ...) -> None: ...

class StreamIngestDocumentsResponse(_message.Message):
    __slots__ = ("document_count", "chunk_count", "skipped_document_count", "updated_document_count")
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    document_count: int
    chunk_count: int
    skipped_document_count: int
    updated_document_count: int
    def __init__(self, document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., skipped_document_count: _Optional[int] = ..., updated_document_count: _Optional[int] = ...) -> None: ...

class SearchDocumentsRequest(_message.Message):
    __slots__ = ("collection", "query", "top_k", "filter", "min_score", "mode", "fusion")
    class FilterEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: str
    top_k: int
    filter: _containers.ScalarMap[str, str]
    min_score: float
    mode: _common_pb2.SearchMode
    fusion: _common_pb2.FusionMethod
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[str] = ..., top_k: _Optional[int] = ..., filter: _Optional[_Mapping[str, str]] = ..., min_score: _Optional[float] = ..., mode: _Optional[_Union[_common_pb2.SearchMode, str]] = ..., fusion: _Optional[_Union[_common_pb2.FusionMethod, str]] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("chunk_id", "document_id", "title", "text", "source", "score", "start_offset", "end_offset", "cosine_similarity")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COSINE_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    document_id: str
    title: str
    text: str
    source: str
    score: float
    start_offset: int
    end_offset: int
    cosine_similarity: float
    def __init__(self, chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ..., score: _Optional[float] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., cosine_similarity: _Optional[float] = ...) -> None: ...

class SearchDocumentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SearchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SearchResult, _Mapping]]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Collection(_message.Message):
    __slots__ = ("name", "chunk_count")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    name: str
    chunk_count: int
    def __init__(self, name: _Optional[str] = ..., chunk_count: _Optional[int] = ...) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[Collection]
    def __init__(self, collections: _Optional[_Iterable[_Union[Collection, _Mapping]]] = ...) -> None: ...
