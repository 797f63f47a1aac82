from mesh.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HaltingMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HALTING_MODE_UNSPECIFIED: _ClassVar[HaltingMode]
    HALTING_MODE_PAPER: _ClassVar[HaltingMode]
    HALTING_MODE_ACT: _ClassVar[HaltingMode]
HALTING_MODE_UNSPECIFIED: HaltingMode
HALTING_MODE_PAPER: HaltingMode
HALTING_MODE_ACT: HaltingMode

class EvaluatePositionsRequest(_message.Message):
    __slots__ = ("model", "positions")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POSITIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    positions: _containers.RepeatedCompositeFieldContainer[_common_pb2.ConnectFourPosition]
    def __init__(self, model: _Optional[str] = ..., positions: _Optional[_Iterable[_Union[_common_pb2.ConnectFourPosition, _Mapping]]] = ...) -> None: ...

class PositionEvaluation(_message.Message):
    __slots__ = ("policy", "value")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    policy: _containers.RepeatedScalarFieldContainer[float]
    value: float
    def __init__(self, policy: _Optional[_Iterable[float]] = ..., value: _Optional[float] = ...) -> None: ...

class EvaluatePositionsResponse(_message.Message):
    __slots__ = ("evaluations", "model")
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    evaluations: _containers.RepeatedCompositeFieldContainer[PositionEvaluation]
    model: Model
    def __init__(self, evaluations: _Optional[_Iterable[_Union[PositionEvaluation, _Mapping]]] = ..., model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class SolveRequest(_message.Message):
    __slots__ = ("model", "grid", "halting_mode", "max_segments")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    HALTING_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    model: str
    grid: str
    halting_mode: HaltingMode
    max_segments: int
    def __init__(self, model: _Optional[str] = ..., grid: _Optional[str] = ..., halting_mode: _Optional[_Union[HaltingMode, str]] = ..., max_segments: _Optional[int] = ...) -> None: ...

class SegmentPrediction(_message.Message):
    __slots__ = ("grid", "halt_probability")
    GRID_FIELD_NUMBER: _ClassVar[int]
    HALT_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    grid: str
    halt_probability: float
    def __init__(self, grid: _Optional[str] = ..., halt_probability: _Optional[float] = ...) -> None: ...

class SolveResponse(_message.Message):
    __slots__ = ("grid", "segments", "segments_used", "halt_probability", "latency_ms", "model")
    GRID_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_USED_FIELD_NUMBER: _ClassVar[int]
    HALT_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    grid: str
    segments: _containers.RepeatedCompositeFieldContainer[SegmentPrediction]
    segments_used: int
    halt_probability: float
    latency_ms: float
    model: Model
    def __init__(self, grid: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[SegmentPrediction, _Mapping]]] = ..., segments_used: _Optional[int] = ..., halt_probability: _Optional[float] = ..., latency_ms: _Optional[float] = ..., model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "version", "architecture", "parameter_count", "device", "metadata", "task", "board")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    BOARD_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    architecture: str
    parameter_count: int
    device: str
    metadata: _containers.ScalarMap[str, str]
    task: str
    board: _common_pb2.ConnectFourBoard
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., architecture: _Optional[str] = ..., parameter_count: _Optional[int] = ..., device: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., task: _Optional[str] = ..., board: _Optional[_Union[_common_pb2.ConnectFourBoard, _Mapping]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class ReloadModelRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ReloadModelResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: Model
    def __init__(self, model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class RoutingStep(_message.Message):
    __slots__ = ("features",)
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    features: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, features: _Optional[_Iterable[float]] = ...) -> None: ...

class PredictRouteRequest(_message.Message):
    __slots__ = ("model", "steps")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    model: str
    steps: _containers.RepeatedCompositeFieldContainer[RoutingStep]
    def __init__(self, model: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[RoutingStep, _Mapping]]] = ...) -> None: ...

class RouteProbability(_message.Message):
    __slots__ = ("route", "probability")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    route: str
    probability: float
    def __init__(self, route: _Optional[str] = ..., probability: _Optional[float] = ...) -> None: ...

class PredictRouteResponse(_message.Message):
    __slots__ = ("routes", "model")
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[RouteProbability]
    model: Model
    def __init__(self, routes: _Optional[_Iterable[_Union[RouteProbability, _Mapping]]] = ..., model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...

class PredictTextRouteRequest(_message.Message):
    __slots__ = ("model", "query")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    model: str
    query: str
    def __init__(self, model: _Optional[str] = ..., query: _Optional[str] = ...) -> None: ...

class PredictTextRouteResponse(_message.Message):
    __slots__ = ("routes", "model")
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    routes: _containers.RepeatedCompositeFieldContainer[RouteProbability]
    model: Model
    def __init__(self, routes: _Optional[_Iterable[_Union[RouteProbability, _Mapping]]] = ..., model: _Optional[_Union[Model, _Mapping]] = ...) -> None: ...
