import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from mesh.orchestrator.v1 import orchestrator_service_pb2 as _orchestrator_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Run(_message.Message):
    __slots__ = ("name", "solve", "answer", "state", "attempts", "create_time", "start_time", "update_time", "end_time", "solve_response", "answer_response", "error", "batch", "batch_index", "last_event_sequence", "cancel_requested", "trace_ids")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATE_UNSPECIFIED: _ClassVar[Run.State]
        STATE_QUEUED: _ClassVar[Run.State]
        STATE_RUNNING: _ClassVar[Run.State]
        STATE_SUCCEEDED: _ClassVar[Run.State]
        STATE_FAILED: _ClassVar[Run.State]
        STATE_CANCELLED: _ClassVar[Run.State]
    STATE_UNSPECIFIED: Run.State
    STATE_QUEUED: Run.State
    STATE_RUNNING: Run.State
    STATE_SUCCEEDED: Run.State
    STATE_FAILED: Run.State
    STATE_CANCELLED: Run.State
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOLVE_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    SOLVE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ANSWER_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TRACE_IDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    solve: _orchestrator_service_pb2.SolveProblemRequest
    answer: _orchestrator_service_pb2.AnswerQueryRequest
    state: Run.State
    attempts: int
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    solve_response: _orchestrator_service_pb2.SolveProblemResponse
    answer_response: _orchestrator_service_pb2.AnswerQueryResponse
    error: _status_pb2.Status
    batch: str
    batch_index: int
    last_event_sequence: int
    cancel_requested: bool
    trace_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., solve: _Optional[_Union[_orchestrator_service_pb2.SolveProblemRequest, _Mapping]] = ..., answer: _Optional[_Union[_orchestrator_service_pb2.AnswerQueryRequest, _Mapping]] = ..., state: _Optional[_Union[Run.State, str]] = ..., attempts: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., solve_response: _Optional[_Union[_orchestrator_service_pb2.SolveProblemResponse, _Mapping]] = ..., answer_response: _Optional[_Union[_orchestrator_service_pb2.AnswerQueryResponse, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., batch: _Optional[str] = ..., batch_index: _Optional[int] = ..., last_event_sequence: _Optional[int] = ..., cancel_requested: _Optional[bool] = ..., trace_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RunStateCounts(_message.Message):
    __slots__ = ("queued", "running", "succeeded", "failed", "cancelled")
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    def __init__(self, queued: _Optional[int] = ..., running: _Optional[int] = ..., succeeded: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("name", "display_name", "create_time", "end_time", "run_count", "state_counts", "state", "cancel_requested", "last_event_sequence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    RUN_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    display_name: str
    create_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    run_count: int
    state_counts: RunStateCounts
    state: Run.State
    cancel_requested: bool
    last_event_sequence: int
    def __init__(self, name: _Optional[str] = ..., display_name: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_count: _Optional[int] = ..., state_counts: _Optional[_Union[RunStateCounts, _Mapping]] = ..., state: _Optional[_Union[Run.State, str]] = ..., cancel_requested: _Optional[bool] = ..., last_event_sequence: _Optional[int] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ("solve", "answer")
    SOLVE_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    solve: _orchestrator_service_pb2.SolveProblemRequest
    answer: _orchestrator_service_pb2.AnswerQueryRequest
    def __init__(self, solve: _Optional[_Union[_orchestrator_service_pb2.SolveProblemRequest, _Mapping]] = ..., answer: _Optional[_Union[_orchestrator_service_pb2.AnswerQueryRequest, _Mapping]] = ...) -> None: ...

class StateChanged(_message.Message):
    __slots__ = ("previous_state", "state", "attempt", "error")
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    previous_state: Run.State
    state: Run.State
    attempt: int
    error: _status_pb2.Status
    def __init__(self, previous_state: _Optional[_Union[Run.State, str]] = ..., state: _Optional[_Union[Run.State, str]] = ..., attempt: _Optional[int] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("sequence", "run", "time", "solve_progress", "state_changed")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    SOLVE_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    run: str
    time: _timestamp_pb2.Timestamp
    solve_progress: _orchestrator_service_pb2.StreamSolveProblemResponse
    state_changed: StateChanged
    def __init__(self, sequence: _Optional[int] = ..., run: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., solve_progress: _Optional[_Union[_orchestrator_service_pb2.StreamSolveProblemResponse, _Mapping]] = ..., state_changed: _Optional[_Union[StateChanged, _Mapping]] = ...) -> None: ...

class CreateRunRequest(_message.Message):
    __slots__ = ("run", "request_id")
    RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    run: Run
    request_id: str
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "filter")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    filter: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., filter: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteRunRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("name", "after_sequence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_sequence: int
    def __init__(self, name: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class CreateBatchRequest(_message.Message):
    __slots__ = ("batch", "items", "request_id")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    batch: Batch
    items: _containers.RepeatedCompositeFieldContainer[BatchItem]
    request_id: str
    def __init__(self, batch: _Optional[_Union[Batch, _Mapping]] = ..., items: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ..., request_id: _Optional[str] = ...) -> None: ...

class GetBatchRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListBatchesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListBatchesResponse(_message.Message):
    __slots__ = ("batches", "next_page_token")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[Batch]
    next_page_token: str
    def __init__(self, batches: _Optional[_Iterable[_Union[Batch, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelBatchRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class WatchBatchRequest(_message.Message):
    __slots__ = ("name", "after_sequence")
    NAME_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    after_sequence: int
    def __init__(self, name: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...
