import datetime

from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from mesh.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Agent(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AGENT_UNSPECIFIED: _ClassVar[Agent]
    AGENT_MCTS: _ClassVar[Agent]
    AGENT_NEURAL: _ClassVar[Agent]
    AGENT_CHECKER: _ClassVar[Agent]
    AGENT_RETRIEVAL: _ClassVar[Agent]
    AGENT_LLM: _ClassVar[Agent]
    AGENT_SOLVER: _ClassVar[Agent]
    AGENT_HRM: _ClassVar[Agent]
    AGENT_TRM: _ClassVar[Agent]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_WIN: _ClassVar[Outcome]
    OUTCOME_DRAW: _ClassVar[Outcome]
    OUTCOME_LOSS: _ClassVar[Outcome]

class RouteDecider(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTE_DECIDER_UNSPECIFIED: _ClassVar[RouteDecider]
    ROUTE_DECIDER_RULES: _ClassVar[RouteDecider]
    ROUTE_DECIDER_LEARNED: _ClassVar[RouteDecider]

class TextRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEXT_ROLE_UNSPECIFIED: _ClassVar[TextRole]
    TEXT_ROLE_DRAFT: _ClassVar[TextRole]
    TEXT_ROLE_DECOMPOSE: _ClassVar[TextRole]
    TEXT_ROLE_REFINE: _ClassVar[TextRole]
    TEXT_ROLE_SEARCH: _ClassVar[TextRole]
AGENT_UNSPECIFIED: Agent
AGENT_MCTS: Agent
AGENT_NEURAL: Agent
AGENT_CHECKER: Agent
AGENT_RETRIEVAL: Agent
AGENT_LLM: Agent
AGENT_SOLVER: Agent
AGENT_HRM: Agent
AGENT_TRM: Agent
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_WIN: Outcome
OUTCOME_DRAW: Outcome
OUTCOME_LOSS: Outcome
ROUTE_DECIDER_UNSPECIFIED: RouteDecider
ROUTE_DECIDER_RULES: RouteDecider
ROUTE_DECIDER_LEARNED: RouteDecider
TEXT_ROLE_UNSPECIFIED: TextRole
TEXT_ROLE_DRAFT: TextRole
TEXT_ROLE_DECOMPOSE: TextRole
TEXT_ROLE_REFINE: TextRole
TEXT_ROLE_SEARCH: TextRole

class SolveProblemRequest(_message.Message):
    __slots__ = ("connect_four", "sudoku", "maze", "agents", "simulations", "max_iterations", "seed", "thread_id")
    CONNECT_FOUR_FIELD_NUMBER: _ClassVar[int]
    SUDOKU_FIELD_NUMBER: _ClassVar[int]
    MAZE_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    connect_four: _common_pb2.ConnectFourPosition
    sudoku: SudokuProblem
    maze: MazeProblem
    agents: _containers.RepeatedScalarFieldContainer[Agent]
    simulations: int
    max_iterations: int
    seed: int
    thread_id: str
    def __init__(self, connect_four: _Optional[_Union[_common_pb2.ConnectFourPosition, _Mapping]] = ..., sudoku: _Optional[_Union[SudokuProblem, _Mapping]] = ..., maze: _Optional[_Union[MazeProblem, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[Agent, str]]] = ..., simulations: _Optional[int] = ..., max_iterations: _Optional[int] = ..., seed: _Optional[int] = ..., thread_id: _Optional[str] = ...) -> None: ...

class AgentVote(_message.Message):
    __slots__ = ("agent", "proposal", "confidence", "latency_ms", "iteration", "rationale")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    proposal: str
    confidence: float
    latency_ms: float
    iteration: int
    rationale: str
    def __init__(self, agent: _Optional[_Union[Agent, str]] = ..., proposal: _Optional[str] = ..., confidence: _Optional[float] = ..., latency_ms: _Optional[float] = ..., iteration: _Optional[int] = ..., rationale: _Optional[str] = ...) -> None: ...

class AgentFailure(_message.Message):
    __slots__ = ("agent", "code", "message", "iteration")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    code: str
    message: str
    iteration: int
    def __init__(self, agent: _Optional[_Union[Agent, str]] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., iteration: _Optional[int] = ...) -> None: ...

class ConnectFourAnswer(_message.Message):
    __slots__ = ("column", "value", "outcome", "score")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    column: int
    value: float
    outcome: Outcome
    score: int
    def __init__(self, column: _Optional[int] = ..., value: _Optional[float] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., score: _Optional[int] = ...) -> None: ...

class SudokuProblem(_message.Message):
    __slots__ = ("puzzle", "box_rows", "box_cols")
    PUZZLE_FIELD_NUMBER: _ClassVar[int]
    BOX_ROWS_FIELD_NUMBER: _ClassVar[int]
    BOX_COLS_FIELD_NUMBER: _ClassVar[int]
    puzzle: str
    box_rows: int
    box_cols: int
    def __init__(self, puzzle: _Optional[str] = ..., box_rows: _Optional[int] = ..., box_cols: _Optional[int] = ...) -> None: ...

class MazeProblem(_message.Message):
    __slots__ = ("grid",)
    GRID_FIELD_NUMBER: _ClassVar[int]
    grid: str
    def __init__(self, grid: _Optional[str] = ...) -> None: ...

class SudokuAnswer(_message.Message):
    __slots__ = ("solution", "valid")
    SOLUTION_FIELD_NUMBER: _ClassVar[int]
    VALID_FIELD_NUMBER: _ClassVar[int]
    solution: str
    valid: bool
    def __init__(self, solution: _Optional[str] = ..., valid: _Optional[bool] = ...) -> None: ...

class MazeAnswer(_message.Message):
    __slots__ = ("grid", "path_length", "optimal")
    GRID_FIELD_NUMBER: _ClassVar[int]
    PATH_LENGTH_FIELD_NUMBER: _ClassVar[int]
    OPTIMAL_FIELD_NUMBER: _ClassVar[int]
    grid: str
    path_length: int
    optimal: bool
    def __init__(self, grid: _Optional[str] = ..., path_length: _Optional[int] = ..., optimal: _Optional[bool] = ...) -> None: ...

class StepTiming(_message.Message):
    __slots__ = ("step", "iteration", "elapsed_ms")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    step: str
    iteration: int
    elapsed_ms: float
    def __init__(self, step: _Optional[str] = ..., iteration: _Optional[int] = ..., elapsed_ms: _Optional[float] = ...) -> None: ...

class SolveProblemResponse(_message.Message):
    __slots__ = ("connect_four", "sudoku", "maze", "confidence", "votes", "agents", "search_statistics", "iterations", "consensus_reached", "timings", "thread_id", "answered_by", "failures", "route_decider", "route_confidence")
    CONNECT_FOUR_FIELD_NUMBER: _ClassVar[int]
    SUDOKU_FIELD_NUMBER: _ClassVar[int]
    MAZE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_STATISTICS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_REACHED_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_DECIDER_FIELD_NUMBER: _ClassVar[int]
    ROUTE_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    connect_four: ConnectFourAnswer
    sudoku: SudokuAnswer
    maze: MazeAnswer
    confidence: float
    votes: _containers.RepeatedCompositeFieldContainer[AgentVote]
    agents: _containers.RepeatedScalarFieldContainer[Agent]
    search_statistics: _common_pb2.SearchStatistics
    iterations: int
    consensus_reached: bool
    timings: _containers.RepeatedCompositeFieldContainer[StepTiming]
    thread_id: str
    answered_by: Agent
    failures: _containers.RepeatedCompositeFieldContainer[AgentFailure]
    route_decider: RouteDecider
    route_confidence: float
    def __init__(self, connect_four: _Optional[_Union[ConnectFourAnswer, _Mapping]] = ..., sudoku: _Optional[_Union[SudokuAnswer, _Mapping]] = ..., maze: _Optional[_Union[MazeAnswer, _Mapping]] = ..., confidence: _Optional[float] = ..., votes: _Optional[_Iterable[_Union[AgentVote, _Mapping]]] = ..., agents: _Optional[_Iterable[_Union[Agent, str]]] = ..., search_statistics: _Optional[_Union[_common_pb2.SearchStatistics, _Mapping]] = ..., iterations: _Optional[int] = ..., consensus_reached: _Optional[bool] = ..., timings: _Optional[_Iterable[_Union[StepTiming, _Mapping]]] = ..., thread_id: _Optional[str] = ..., answered_by: _Optional[_Union[Agent, str]] = ..., failures: _Optional[_Iterable[_Union[AgentFailure, _Mapping]]] = ..., route_decider: _Optional[_Union[RouteDecider, str]] = ..., route_confidence: _Optional[float] = ...) -> None: ...

class StreamSolveProblemRequest(_message.Message):
    __slots__ = ("connect_four", "sudoku", "maze", "agents", "simulations", "max_iterations", "seed", "thread_id")
    CONNECT_FOUR_FIELD_NUMBER: _ClassVar[int]
    SUDOKU_FIELD_NUMBER: _ClassVar[int]
    MAZE_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    connect_four: _common_pb2.ConnectFourPosition
    sudoku: SudokuProblem
    maze: MazeProblem
    agents: _containers.RepeatedScalarFieldContainer[Agent]
    simulations: int
    max_iterations: int
    seed: int
    thread_id: str
    def __init__(self, connect_four: _Optional[_Union[_common_pb2.ConnectFourPosition, _Mapping]] = ..., sudoku: _Optional[_Union[SudokuProblem, _Mapping]] = ..., maze: _Optional[_Union[MazeProblem, _Mapping]] = ..., agents: _Optional[_Iterable[_Union[Agent, str]]] = ..., simulations: _Optional[int] = ..., max_iterations: _Optional[int] = ..., seed: _Optional[int] = ..., thread_id: _Optional[str] = ...) -> None: ...

class IterationStarted(_message.Message):
    __slots__ = ("agents", "simulations", "reason")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SIMULATIONS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedScalarFieldContainer[Agent]
    simulations: int
    reason: str
    def __init__(self, agents: _Optional[_Iterable[_Union[Agent, str]]] = ..., simulations: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class AgentStarted(_message.Message):
    __slots__ = ("agent",)
    AGENT_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    def __init__(self, agent: _Optional[_Union[Agent, str]] = ...) -> None: ...

class AgentFinished(_message.Message):
    __slots__ = ("agent", "latency_ms", "vote", "abstain_reason", "error_code", "error_message")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    VOTE_FIELD_NUMBER: _ClassVar[int]
    ABSTAIN_REASON_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    agent: Agent
    latency_ms: float
    vote: AgentVote
    abstain_reason: str
    error_code: str
    error_message: str
    def __init__(self, agent: _Optional[_Union[Agent, str]] = ..., latency_ms: _Optional[float] = ..., vote: _Optional[_Union[AgentVote, _Mapping]] = ..., abstain_reason: _Optional[str] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ...) -> None: ...

class RoundTally(_message.Message):
    __slots__ = ("answer", "confidence", "consensus_score", "agreed", "verified", "votes")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    CONSENSUS_SCORE_FIELD_NUMBER: _ClassVar[int]
    AGREED_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    answer: str
    confidence: float
    consensus_score: float
    agreed: bool
    verified: bool
    votes: _containers.RepeatedCompositeFieldContainer[AgentVote]
    def __init__(self, answer: _Optional[str] = ..., confidence: _Optional[float] = ..., consensus_score: _Optional[float] = ..., agreed: _Optional[bool] = ..., verified: _Optional[bool] = ..., votes: _Optional[_Iterable[_Union[AgentVote, _Mapping]]] = ...) -> None: ...

class StreamSolveProblemResponse(_message.Message):
    __slots__ = ("iteration", "elapsed_ms", "iteration_started", "agent_started", "agent_finished", "tally", "response")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_STARTED_FIELD_NUMBER: _ClassVar[int]
    AGENT_STARTED_FIELD_NUMBER: _ClassVar[int]
    AGENT_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TALLY_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    elapsed_ms: float
    iteration_started: IterationStarted
    agent_started: AgentStarted
    agent_finished: AgentFinished
    tally: RoundTally
    response: SolveProblemResponse
    def __init__(self, iteration: _Optional[int] = ..., elapsed_ms: _Optional[float] = ..., iteration_started: _Optional[_Union[IterationStarted, _Mapping]] = ..., agent_started: _Optional[_Union[AgentStarted, _Mapping]] = ..., agent_finished: _Optional[_Union[AgentFinished, _Mapping]] = ..., tally: _Optional[_Union[RoundTally, _Mapping]] = ..., response: _Optional[_Union[SolveProblemResponse, _Mapping]] = ...) -> None: ...

class AnswerQueryRequest(_message.Message):
    __slots__ = ("query", "collection", "top_k", "mcts_iterations", "thread_id", "sample_count", "temperature", "max_tokens", "max_cost_usd", "search_mode", "fusion", "max_answer_tokens", "role", "step_branching", "max_steps", "max_refinements")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MCTS_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    MAX_ANSWER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STEP_BRANCHING_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_REFINEMENTS_FIELD_NUMBER: _ClassVar[int]
    query: str
    collection: str
    top_k: int
    mcts_iterations: int
    thread_id: str
    sample_count: int
    temperature: float
    max_tokens: int
    max_cost_usd: float
    search_mode: _common_pb2.SearchMode
    fusion: _common_pb2.FusionMethod
    max_answer_tokens: int
    role: TextRole
    step_branching: int
    max_steps: int
    max_refinements: int
    def __init__(self, query: _Optional[str] = ..., collection: _Optional[str] = ..., top_k: _Optional[int] = ..., mcts_iterations: _Optional[int] = ..., thread_id: _Optional[str] = ..., sample_count: _Optional[int] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_cost_usd: _Optional[float] = ..., search_mode: _Optional[_Union[_common_pb2.SearchMode, str]] = ..., fusion: _Optional[_Union[_common_pb2.FusionMethod, str]] = ..., max_answer_tokens: _Optional[int] = ..., role: _Optional[_Union[TextRole, str]] = ..., step_branching: _Optional[int] = ..., max_steps: _Optional[int] = ..., max_refinements: _Optional[int] = ...) -> None: ...

class SubQuestion(_message.Message):
    __slots__ = ("question", "answer", "document_ids")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ..., document_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Refinement(_message.Message):
    __slots__ = ("draft", "critique", "revised")
    DRAFT_FIELD_NUMBER: _ClassVar[int]
    CRITIQUE_FIELD_NUMBER: _ClassVar[int]
    REVISED_FIELD_NUMBER: _ClassVar[int]
    draft: str
    critique: str
    revised: bool
    def __init__(self, draft: _Optional[str] = ..., critique: _Optional[str] = ..., revised: _Optional[bool] = ...) -> None: ...

class ReasoningStep(_message.Message):
    __slots__ = ("text", "value", "checked", "final")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    value: float
    checked: bool
    final: bool
    def __init__(self, text: _Optional[str] = ..., value: _Optional[float] = ..., checked: _Optional[bool] = ..., final: _Optional[bool] = ...) -> None: ...

class StepSearchResult(_message.Message):
    __slots__ = ("trajectory", "complete", "statistics", "leaves_evaluated", "steps_proposed", "max_depth")
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    STATISTICS_FIELD_NUMBER: _ClassVar[int]
    LEAVES_EVALUATED_FIELD_NUMBER: _ClassVar[int]
    STEPS_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    trajectory: _containers.RepeatedCompositeFieldContainer[ReasoningStep]
    complete: bool
    statistics: _common_pb2.SearchStatistics
    leaves_evaluated: int
    steps_proposed: int
    max_depth: int
    def __init__(self, trajectory: _Optional[_Iterable[_Union[ReasoningStep, _Mapping]]] = ..., complete: _Optional[bool] = ..., statistics: _Optional[_Union[_common_pb2.SearchStatistics, _Mapping]] = ..., leaves_evaluated: _Optional[int] = ..., steps_proposed: _Optional[int] = ..., max_depth: _Optional[int] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("document_id", "title", "text", "score", "source")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    title: str
    text: str
    score: float
    source: str
    def __init__(self, document_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., score: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class AnswerQueryResponse(_message.Message):
    __slots__ = ("answer", "confidence", "sources", "votes", "agents", "provider", "offline", "iterations", "timings", "thread_id", "failures", "passages_only", "drafts", "stop_reason", "total_tokens", "cost_usd", "cost_known", "role", "sub_questions", "refinements", "step_search", "route_decider", "route_confidence", "ungrounded", "prompt_tokens", "completion_tokens", "finish_reason")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    PASSAGES_ONLY_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    COST_KNOWN_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUB_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    REFINEMENTS_FIELD_NUMBER: _ClassVar[int]
    STEP_SEARCH_FIELD_NUMBER: _ClassVar[int]
    ROUTE_DECIDER_FIELD_NUMBER: _ClassVar[int]
    ROUTE_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    UNGROUNDED_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    answer: str
    confidence: float
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    votes: _containers.RepeatedCompositeFieldContainer[AgentVote]
    agents: _containers.RepeatedScalarFieldContainer[Agent]
    provider: str
    offline: bool
    iterations: int
    timings: _containers.RepeatedCompositeFieldContainer[StepTiming]
    thread_id: str
    failures: _containers.RepeatedCompositeFieldContainer[AgentFailure]
    passages_only: bool
    drafts: _containers.RepeatedCompositeFieldContainer[TextDraft]
    stop_reason: str
    total_tokens: int
    cost_usd: float
    cost_known: bool
    role: TextRole
    sub_questions: _containers.RepeatedCompositeFieldContainer[SubQuestion]
    refinements: _containers.RepeatedCompositeFieldContainer[Refinement]
    step_search: StepSearchResult
    route_decider: RouteDecider
    route_confidence: float
    ungrounded: bool
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    def __init__(self, answer: _Optional[str] = ..., confidence: _Optional[float] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., votes: _Optional[_Iterable[_Union[AgentVote, _Mapping]]] = ..., agents: _Optional[_Iterable[_Union[Agent, str]]] = ..., provider: _Optional[str] = ..., offline: _Optional[bool] = ..., iterations: _Optional[int] = ..., timings: _Optional[_Iterable[_Union[StepTiming, _Mapping]]] = ..., thread_id: _Optional[str] = ..., failures: _Optional[_Iterable[_Union[AgentFailure, _Mapping]]] = ..., passages_only: _Optional[bool] = ..., drafts: _Optional[_Iterable[_Union[TextDraft, _Mapping]]] = ..., stop_reason: _Optional[str] = ..., total_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ..., cost_known: _Optional[bool] = ..., role: _Optional[_Union[TextRole, str]] = ..., sub_questions: _Optional[_Iterable[_Union[SubQuestion, _Mapping]]] = ..., refinements: _Optional[_Iterable[_Union[Refinement, _Mapping]]] = ..., step_search: _Optional[_Union[StepSearchResult, _Mapping]] = ..., route_decider: _Optional[_Union[RouteDecider, str]] = ..., route_confidence: _Optional[float] = ..., ungrounded: _Optional[bool] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., finish_reason: _Optional[str] = ...) -> None: ...

class StreamAnswerQueryRequest(_message.Message):
    __slots__ = ("query", "collection", "top_k", "mcts_iterations", "thread_id", "sample_count", "temperature", "max_tokens", "max_cost_usd", "search_mode", "fusion", "max_answer_tokens", "role", "step_branching", "max_steps", "max_refinements")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MCTS_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    THREAD_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_USD_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    MAX_ANSWER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STEP_BRANCHING_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_REFINEMENTS_FIELD_NUMBER: _ClassVar[int]
    query: str
    collection: str
    top_k: int
    mcts_iterations: int
    thread_id: str
    sample_count: int
    temperature: float
    max_tokens: int
    max_cost_usd: float
    search_mode: _common_pb2.SearchMode
    fusion: _common_pb2.FusionMethod
    max_answer_tokens: int
    role: TextRole
    step_branching: int
    max_steps: int
    max_refinements: int
    def __init__(self, query: _Optional[str] = ..., collection: _Optional[str] = ..., top_k: _Optional[int] = ..., mcts_iterations: _Optional[int] = ..., thread_id: _Optional[str] = ..., sample_count: _Optional[int] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_cost_usd: _Optional[float] = ..., search_mode: _Optional[_Union[_common_pb2.SearchMode, str]] = ..., fusion: _Optional[_Union[_common_pb2.FusionMethod, str]] = ..., max_answer_tokens: _Optional[int] = ..., role: _Optional[_Union[TextRole, str]] = ..., step_branching: _Optional[int] = ..., max_steps: _Optional[int] = ..., max_refinements: _Optional[int] = ...) -> None: ...

class SourcesRetrieved(_message.Message):
    __slots__ = ("sources",)
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    def __init__(self, sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ...) -> None: ...

class StreamAnswerQueryResponse(_message.Message):
    __slots__ = ("iteration", "elapsed_ms", "sources", "answer_delta", "iteration_started", "agent_started", "agent_finished", "tally", "response")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    ANSWER_DELTA_FIELD_NUMBER: _ClassVar[int]
    ITERATION_STARTED_FIELD_NUMBER: _ClassVar[int]
    AGENT_STARTED_FIELD_NUMBER: _ClassVar[int]
    AGENT_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TALLY_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    elapsed_ms: float
    sources: SourcesRetrieved
    answer_delta: str
    iteration_started: IterationStarted
    agent_started: AgentStarted
    agent_finished: AgentFinished
    tally: RoundTally
    response: AnswerQueryResponse
    def __init__(self, iteration: _Optional[int] = ..., elapsed_ms: _Optional[float] = ..., sources: _Optional[_Union[SourcesRetrieved, _Mapping]] = ..., answer_delta: _Optional[str] = ..., iteration_started: _Optional[_Union[IterationStarted, _Mapping]] = ..., agent_started: _Optional[_Union[AgentStarted, _Mapping]] = ..., agent_finished: _Optional[_Union[AgentFinished, _Mapping]] = ..., tally: _Optional[_Union[RoundTally, _Mapping]] = ..., response: _Optional[_Union[AnswerQueryResponse, _Mapping]] = ...) -> None: ...

class TextDraft(_message.Message):
    __slots__ = ("text", "answer", "votes", "iteration", "provider", "model", "total_tokens", "cost_usd")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    VOTES_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    text: str
    answer: str
    votes: int
    iteration: int
    provider: str
    model: str
    total_tokens: int
    cost_usd: float
    def __init__(self, text: _Optional[str] = ..., answer: _Optional[str] = ..., votes: _Optional[int] = ..., iteration: _Optional[int] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., total_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ...) -> None: ...

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
