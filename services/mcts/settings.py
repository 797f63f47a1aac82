"""Settings of the mcts service (env prefix `MCTS_`), read once in `main()` and passed down."""

from __future__ import annotations

from pydantic import model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ServiceSettings


class MctsSettings(ServiceSettings):
    """The mcts service's one frozen settings object."""

    model_config = SettingsConfigDict(
        env_prefix="MCTS_", frozen=True, extra="ignore", populate_by_name=True
    )

    port: int = 50052

    default_simulations: int = 100_000
    """Simulations of a search whose request leaves `simulations` unset."""
    exploration: float = 2.0
    """UCB1 constant c of a search whose request leaves `exploration` unset."""
    max_threads: int = 4
    """Most trees one search runs in parallel; a request asking for more (up to the contract's 64)
    gets this many, and the response's `threads` says so."""
    max_tree_nodes: int = 2_000_000
    """Most nodes of each tree (30 bytes per node; a small search allocates only what it can use);
    a search that fills it keeps simulating from the leaves it has and reports `tree_full`."""
    deadline_margin_s: float = 0.05
    """Seconds kept back from the caller's deadline to build and send the response."""
    neural_target: str = "127.0.0.1:50053"
    """host:port of the neural service (EvaluatePositions) for LEAF_EVALUATOR_NEURAL searches."""
    neural_timeout_s: float = 10.0
    """Deadline of one EvaluatePositions call, seconds."""
    neural_batch_size: int = 16
    """Leaves per batch of a neural search whose request leaves `batch_size` unset."""
    external_reply_timeout_s: float = 60.0
    """Seconds SearchExternal waits for one reply when the caller set no deadline."""

    @model_validator(mode="after")
    def _ranges(self) -> MctsSettings:
        if not 1 <= self.default_simulations <= 10_000_000:
            raise ValueError("default_simulations must be in 1..10,000,000")
        if self.exploration < 0:
            raise ValueError("exploration must be >= 0")
        if not 1 <= self.max_threads <= 64:
            raise ValueError("max_threads must be in 1..64")
        if self.max_tree_nodes < 8:
            raise ValueError("max_tree_nodes must be >= 8")
        if self.deadline_margin_s < 0:
            raise ValueError("deadline_margin_s must be >= 0")
        if self.neural_timeout_s <= 0 or self.external_reply_timeout_s <= 0:
            raise ValueError("neural_timeout_s and external_reply_timeout_s must be > 0")
        if not 1 <= self.neural_batch_size <= 1024:
            raise ValueError("neural_batch_size must be in 1..1024")
        return self
