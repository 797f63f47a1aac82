from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_UNSPECIFIED: _ClassVar[SearchMode]
    SEARCH_MODE_DENSE: _ClassVar[SearchMode]
    SEARCH_MODE_SPARSE: _ClassVar[SearchMode]
    SEARCH_MODE_HYBRID: _ClassVar[SearchMode]

class FusionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_METHOD_UNSPECIFIED: _ClassVar[FusionMethod]
    FUSION_METHOD_DBSF: _ClassVar[FusionMethod]
    FUSION_METHOD_RRF: _ClassVar[FusionMethod]
SEARCH_MODE_UNSPECIFIED: SearchMode
SEARCH_MODE_DENSE: SearchMode
SEARCH_MODE_SPARSE: SearchMode
SEARCH_MODE_HYBRID: SearchMode
FUSION_METHOD_UNSPECIFIED: FusionMethod
FUSION_METHOD_DBSF: FusionMethod
FUSION_METHOD_RRF: FusionMethod

class ConnectFourPosition(_message.Message):
    __slots__ = ("moves", "board")
    MOVES_FIELD_NUMBER: _ClassVar[int]
    BOARD_FIELD_NUMBER: _ClassVar[int]
    moves: str
    board: ConnectFourBoard
    def __init__(self, moves: _Optional[str] = ..., board: _Optional[_Union[ConnectFourBoard, _Mapping]] = ...) -> None: ...

class ConnectFourBoard(_message.Message):
    __slots__ = ("columns", "rows")
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    columns: int
    rows: int
    def __init__(self, columns: _Optional[int] = ..., rows: _Optional[int] = ...) -> None: ...

class SearchStatistics(_message.Message):
    __slots__ = ("simulations", "simulations_per_second", "tree_size", "max_depth", "root_value", "actions", "elapsed_ms", "seed", "threads", "tree_full", "collisions", "evaluations", "batches", "batch_selection_ms", "evaluation_ms", "batch_backup_ms", "transposition_hits", "selection_ms", "expansion_ms", "rollout_ms", "backup_ms", "wait_ms", "timed_simulations")
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TREE_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    ROOT_VALUE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    TREE_FULL_FIELD_NUMBER: _ClassVar[int]
    COLLISIONS_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SELECTION_MS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_MS_FIELD_NUMBER: _ClassVar[int]
    BATCH_BACKUP_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSPOSITION_HITS_FIELD_NUMBER: _ClassVar[int]
    SELECTION_MS_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_MS_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BACKUP_MS_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TIMED_SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    simulations: int
    simulations_per_second: float
    tree_size: int
    max_depth: int
    root_value: float
    actions: _containers.RepeatedCompositeFieldContainer[ActionStatistics]
    elapsed_ms: float
    seed: int
    threads: int
    tree_full: bool
    collisions: int
    evaluations: int
    batches: int
    batch_selection_ms: float
    evaluation_ms: float
    batch_backup_ms: float
    transposition_hits: int
    selection_ms: float
    expansion_ms: float
    rollout_ms: float
    backup_ms: float
    wait_ms: float
    timed_simulations: int
    def __init__(self, simulations: _Optional[int] = ..., simulations_per_second: _Optional[float] = ..., tree_size: _Optional[int] = ..., max_depth: _Optional[int] = ..., root_value: _Optional[float] = ..., actions: _Optional[_Iterable[_Union[ActionStatistics, _Mapping]]] = ..., elapsed_ms: _Optional[float] = ..., seed: _Optional[int] = ..., threads: _Optional[int] = ..., tree_full: _Optional[bool] = ..., collisions: _Optional[int] = ..., evaluations: _Optional[int] = ..., batches: _Optional[int] = ..., batch_selection_ms: _Optional[float] = ..., evaluation_ms: _Optional[float] = ..., batch_backup_ms: _Optional[float] = ..., transposition_hits: _Optional[int] = ..., selection_ms: _Optional[float] = ..., expansion_ms: _Optional[float] = ..., rollout_ms: _Optional[float] = ..., backup_ms: _Optional[float] = ..., wait_ms: _Optional[float] = ..., timed_simulations: _Optional[int] = ...) -> None: ...

class ActionStatistics(_message.Message):
    __slots__ = ("action", "visits", "value", "prior")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    VISITS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    action: int
    visits: int
    value: float
    prior: float
    def __init__(self, action: _Optional[int] = ..., visits: _Optional[int] = ..., value: _Optional[float] = ..., prior: _Optional[float] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("id", "title", "text", "source")
    ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    id: str
    title: str
    text: str
    source: str
    def __init__(self, id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...
