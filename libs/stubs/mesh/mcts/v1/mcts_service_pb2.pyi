from mesh.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Game(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GAME_UNSPECIFIED: _ClassVar[Game]
    GAME_CONNECT_FOUR: _ClassVar[Game]

class Parallelism(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARALLELISM_UNSPECIFIED: _ClassVar[Parallelism]
    PARALLELISM_ROOT: _ClassVar[Parallelism]
    PARALLELISM_TREE: _ClassVar[Parallelism]

class SelectionRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SELECTION_RULE_UNSPECIFIED: _ClassVar[SelectionRule]
    SELECTION_RULE_UCT: _ClassVar[SelectionRule]
    SELECTION_RULE_PUCT: _ClassVar[SelectionRule]
    SELECTION_RULE_GUMBEL: _ClassVar[SelectionRule]

class LeafEvaluator(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEAF_EVALUATOR_UNSPECIFIED: _ClassVar[LeafEvaluator]
    LEAF_EVALUATOR_ROLLOUT: _ClassVar[LeafEvaluator]
    LEAF_EVALUATOR_NEURAL: _ClassVar[LeafEvaluator]
GAME_UNSPECIFIED: Game
GAME_CONNECT_FOUR: Game
PARALLELISM_UNSPECIFIED: Parallelism
PARALLELISM_ROOT: Parallelism
PARALLELISM_TREE: Parallelism
SELECTION_RULE_UNSPECIFIED: SelectionRule
SELECTION_RULE_UCT: SelectionRule
SELECTION_RULE_PUCT: SelectionRule
SELECTION_RULE_GUMBEL: SelectionRule
LEAF_EVALUATOR_UNSPECIFIED: LeafEvaluator
LEAF_EVALUATOR_ROLLOUT: LeafEvaluator
LEAF_EVALUATOR_NEURAL: LeafEvaluator

class SearchRequest(_message.Message):
    __slots__ = ("game", "connect_four", "simulations", "exploration", "seed", "threads", "rule", "evaluator", "model", "batch_size", "virtual_loss", "gumbel_num_considered", "parallelism", "transpositions", "widening_k", "widening_alpha", "rave_k", "dirichlet_alpha", "dirichlet_epsilon", "temperature")
    GAME_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FOUR_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    EXPLORATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    EVALUATOR_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_NUM_CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    TRANSPOSITIONS_FIELD_NUMBER: _ClassVar[int]
    WIDENING_K_FIELD_NUMBER: _ClassVar[int]
    WIDENING_ALPHA_FIELD_NUMBER: _ClassVar[int]
    RAVE_K_FIELD_NUMBER: _ClassVar[int]
    DIRICHLET_ALPHA_FIELD_NUMBER: _ClassVar[int]
    DIRICHLET_EPSILON_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    game: Game
    connect_four: _common_pb2.ConnectFourPosition
    simulations: int
    exploration: float
    seed: int
    threads: int
    rule: SelectionRule
    evaluator: LeafEvaluator
    model: str
    batch_size: int
    virtual_loss: float
    gumbel_num_considered: int
    parallelism: Parallelism
    transpositions: bool
    widening_k: float
    widening_alpha: float
    rave_k: float
    dirichlet_alpha: float
    dirichlet_epsilon: float
    temperature: float
    def __init__(self, game: _Optional[_Union[Game, str]] = ..., connect_four: _Optional[_Union[_common_pb2.ConnectFourPosition, _Mapping]] = ..., simulations: _Optional[int] = ..., exploration: _Optional[float] = ..., seed: _Optional[int] = ..., threads: _Optional[int] = ..., rule: _Optional[_Union[SelectionRule, str]] = ..., evaluator: _Optional[_Union[LeafEvaluator, str]] = ..., model: _Optional[str] = ..., batch_size: _Optional[int] = ..., virtual_loss: _Optional[float] = ..., gumbel_num_considered: _Optional[int] = ..., parallelism: _Optional[_Union[Parallelism, str]] = ..., transpositions: _Optional[bool] = ..., widening_k: _Optional[float] = ..., widening_alpha: _Optional[float] = ..., rave_k: _Optional[float] = ..., dirichlet_alpha: _Optional[float] = ..., dirichlet_epsilon: _Optional[float] = ..., temperature: _Optional[float] = ...) -> None: ...

class ExternalSearchSettings(_message.Message):
    __slots__ = ("num_actions", "simulations", "batch_size", "c_puct", "virtual_loss", "seed", "rule", "players", "gumbel_num_considered", "dirichlet_alpha", "dirichlet_epsilon", "temperature", "max_nodes")
    NUM_ACTIONS_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    C_PUCT_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    PLAYERS_FIELD_NUMBER: _ClassVar[int]
    GUMBEL_NUM_CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    DIRICHLET_ALPHA_FIELD_NUMBER: _ClassVar[int]
    DIRICHLET_EPSILON_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    num_actions: int
    simulations: int
    batch_size: int
    c_puct: float
    virtual_loss: float
    seed: int
    rule: SelectionRule
    players: int
    gumbel_num_considered: int
    dirichlet_alpha: float
    dirichlet_epsilon: float
    temperature: float
    max_nodes: int
    def __init__(self, num_actions: _Optional[int] = ..., simulations: _Optional[int] = ..., batch_size: _Optional[int] = ..., c_puct: _Optional[float] = ..., virtual_loss: _Optional[float] = ..., seed: _Optional[int] = ..., rule: _Optional[_Union[SelectionRule, str]] = ..., players: _Optional[int] = ..., gumbel_num_considered: _Optional[int] = ..., dirichlet_alpha: _Optional[float] = ..., dirichlet_epsilon: _Optional[float] = ..., temperature: _Optional[float] = ..., max_nodes: _Optional[int] = ...) -> None: ...

class LeafEvaluation(_message.Message):
    __slots__ = ("priors", "value", "terminal")
    PRIORS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    priors: _containers.RepeatedScalarFieldContainer[float]
    value: float
    terminal: bool
    def __init__(self, priors: _Optional[_Iterable[float]] = ..., value: _Optional[float] = ..., terminal: _Optional[bool] = ...) -> None: ...

class LeafEvaluations(_message.Message):
    __slots__ = ("batch_id", "leaves")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    leaves: _containers.RepeatedCompositeFieldContainer[LeafEvaluation]
    def __init__(self, batch_id: _Optional[int] = ..., leaves: _Optional[_Iterable[_Union[LeafEvaluation, _Mapping]]] = ...) -> None: ...

class SearchExternalRequest(_message.Message):
    __slots__ = ("settings", "evaluations")
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    settings: ExternalSearchSettings
    evaluations: LeafEvaluations
    def __init__(self, settings: _Optional[_Union[ExternalSearchSettings, _Mapping]] = ..., evaluations: _Optional[_Union[LeafEvaluations, _Mapping]] = ...) -> None: ...

class Leaf(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, path: _Optional[_Iterable[int]] = ...) -> None: ...

class LeafBatch(_message.Message):
    __slots__ = ("batch_id", "leaves")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    LEAVES_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    leaves: _containers.RepeatedCompositeFieldContainer[Leaf]
    def __init__(self, batch_id: _Optional[int] = ..., leaves: _Optional[_Iterable[_Union[Leaf, _Mapping]]] = ...) -> None: ...

class ExternalSearchResult(_message.Message):
    __slots__ = ("best_action", "policy", "statistics")
    BEST_ACTION_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    STATISTICS_FIELD_NUMBER: _ClassVar[int]
    best_action: int
    policy: _containers.RepeatedScalarFieldContainer[float]
    statistics: _common_pb2.SearchStatistics
    def __init__(self, best_action: _Optional[int] = ..., policy: _Optional[_Iterable[float]] = ..., statistics: _Optional[_Union[_common_pb2.SearchStatistics, _Mapping]] = ...) -> None: ...

class SearchExternalResponse(_message.Message):
    __slots__ = ("batch", "result")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    batch: LeafBatch
    result: ExternalSearchResult
    def __init__(self, batch: _Optional[_Union[LeafBatch, _Mapping]] = ..., result: _Optional[_Union[ExternalSearchResult, _Mapping]] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("best_action", "statistics")
    BEST_ACTION_FIELD_NUMBER: _ClassVar[int]
    STATISTICS_FIELD_NUMBER: _ClassVar[int]
    best_action: int
    statistics: _common_pb2.SearchStatistics
    def __init__(self, best_action: _Optional[int] = ..., statistics: _Optional[_Union[_common_pb2.SearchStatistics, _Mapping]] = ...) -> None: ...
