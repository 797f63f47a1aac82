from mesh.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Game(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GAME_UNSPECIFIED: _ClassVar[Game]
    GAME_CONNECT_FOUR: _ClassVar[Game]
GAME_UNSPECIFIED: Game
GAME_CONNECT_FOUR: Game

class SearchRequest(_message.Message):
    __slots__ = ("game", "connect_four", "simulations", "exploration", "seed", "threads")
    GAME_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FOUR_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    EXPLORATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    game: Game
    connect_four: _common_pb2.ConnectFourPosition
    simulations: int
    exploration: float
    seed: int
    threads: int
    def __init__(self, game: _Optional[_Union[Game, str]] = ..., connect_four: _Optional[_Union[_common_pb2.ConnectFourPosition, _Mapping]] = ..., simulations: _Optional[int] = ..., exploration: _Optional[float] = ..., seed: _Optional[int] = ..., threads: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("best_action", "statistics")
    BEST_ACTION_FIELD_NUMBER: _ClassVar[int]
    STATISTICS_FIELD_NUMBER: _ClassVar[int]
    best_action: int
    statistics: _common_pb2.SearchStatistics
    def __init__(self, best_action: _Optional[int] = ..., statistics: _Optional[_Union[_common_pb2.SearchStatistics, _Mapping]] = ...) -> None: ...
