"""The one typed settings object of the AlphaZero loop (`mcts-mesh train connect4-az`).

Defaults follow AlphaZero (Silver et al. 2018) scaled to a 2-core CPU, with the Connect Four
constants of AlphaZero.jl's tutorial where the paper has none (Dirichlet alpha 1.0, epsilon 0.25,
c_puct 2, the gating threshold 55%). Every field is validated when the object is built (pydantic),
so a bad value fails at once with the field's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from libs.connect4.geometry import STANDARD, Board
from training.az.boards import Boards, boards_for
from training.pons import DEFAULT_PONS_DIR

PONS_FILES = ("Test_L3_R1", "Test_L2_R1", "Test_L2_R2", "Test_L1_R1", "Test_L1_R2", "Test_L1_R3")
"""The six public halves of Pascal Pons' benchmark in ../shared/data/connect4-pons."""


class AZSettings(BaseModel):
    """Everything one run reads; stored whole in every checkpoint's history."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path = Path("runs/connect4-az")
    """Holds checkpoints/, replay/ and best.json."""
    generations: int = Field(10, ge=1)
    """Generations to reach (a resumed run counts the ones already done)."""
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto = CUDA when torch sees a GPU, else the CPU."""
    torch_threads: int = Field(1, ge=1)
    game: Literal["connect4", "tictactoe"] = "connect4"
    """The game: Connect Four on `board`, or tic-tac-toe (3 x 3, `board` unused)."""
    board: str = STANDARD.name
    """Connect Four's board as 'WxH' (`libs.connect4.geometry.Board`: 4..9 columns, >= 4 rows,
    <= 42 cells); the network's planes and policy follow it."""

    # network
    channels: int = Field(48, ge=1)
    blocks: int = Field(4, ge=0)
    value_hidden: int = Field(64, ge=1)
    init_from: Path | None = None
    """A connect4_pv checkpoint of the same sizes to start generation 0 from (None: random)."""

    # self-play
    games_per_generation: int = Field(200, ge=1)
    concurrent_games: int = Field(64, ge=1)
    simulations: int = Field(200, ge=1)
    leaves_per_search: int = Field(8, ge=1)
    c_puct: float = Field(2.0, ge=0)
    virtual_loss: float = Field(1.0, ge=0)
    dirichlet_alpha: float = Field(1.0, gt=0)
    dirichlet_epsilon: float = Field(0.25, ge=0, le=1)
    temperature_moves: int = Field(10, ge=0)
    """Plies played at temperature 1 (then the most visited column)."""
    opening_plies: int = Field(0, ge=0)
    """Each self-play game first plays k uniformly random moves, k drawn from 0..opening_plies,
    not trained on (`training.az.games`: positions good play avoids reach the data); 0: none.
    The arena never does."""
    actors: int = Field(0, ge=0)
    """Self-play actor processes (`mcts-mesh selfplay-actor`) the learner starts on this
    machine; 0 with `external_actors` off plays self-play in the learner."""
    external_actors: bool = False
    """Actors run elsewhere (e.g. a Kubernetes Deployment on a shared volume): the learner only
    waits for their shards."""

    # replay buffer
    window_generations: int = Field(4, ge=1)
    """Generations of positions the learner samples from; older shards are deleted."""
    mirror: bool = True
    """Add each position's symmetric images: Connect Four's left-right mirror, tic-tac-toe's
    seven rotations and reflections (`boards.Boards.symmetries`)."""

    # training
    steps_per_generation: int = Field(400, ge=1)
    batch_size: int = Field(256, ge=1)
    learning_rate: float = Field(1e-3, gt=0)
    """AdamW's learning rate until the first step of `learning_rate_steps`."""
    learning_rate_steps: tuple[tuple[int, float], ...] = ()
    """(generation, learning rate) pairs, generations increasing: from that generation on, the
    learner trains at that rate (AlphaZero's stepped schedule, Silver et al. 2018,
    supplementary "Configuration"; here by generation). E.g. ((24, 5e-4), (32, 2e-4)); on the
    command line `--set 'learning_rate_steps=[[24, 0.0005], [32, 0.0002]]'`."""
    weight_decay: float = Field(1e-4, ge=0)

    # arena
    arena_games: int = Field(200, ge=2)
    """Games per gating match, half with each colour."""
    arena_threshold: float = Field(0.55, gt=0, le=1)
    """Score (win 1, draw 1/2) the candidate needs to become the best."""
    arena_simulations: int | None = Field(None, ge=1)
    """Simulations per arena move; None: as self-play."""
    arena_temperature_moves: int = Field(0, ge=0)

    # evaluation
    pons_dir: Path = DEFAULT_PONS_DIR
    pons_files: tuple[str, ...] = ("Test_L3_R1", "Test_L2_R1")
    pons_positions: int = Field(100, ge=0)
    """First positions of each file measured each generation (0: no Pons evaluation)."""
    pons_simulations: int = Field(800, ge=1)
    """Simulations of the PUCT evaluation (no noise, most visited column)."""
    exact: bool = True
    """Judge every generation by the exact solver on positions of the game (`training.az.exact`;
    Connect Four boards other than 7x6 and tic-tac-toe)."""
    exact_max_positions: int = Field(200_000, ge=1)
    """Every reachable unfinished position is judged when there are at most this many; else a
    uniform sample of `exact_sample` of them (or, where they are too many to list, positions of
    random games)."""
    exact_sample: int = Field(5_000, ge=1)
    exact_puct_positions: int = Field(5_000, ge=1)
    """Positions PUCT is judged on: a uniform sample of the judged positions (all when fewer)."""
    exact_simulations: int = Field(200, ge=1)
    """Simulations of the exact evaluation's PUCT (no noise, most visited action)."""

    @field_validator("board")
    @classmethod
    def _board(cls, value: str) -> str:
        return Board.parse(value).name

    @model_validator(mode="after")
    def _check(self) -> AZSettings:
        if self.arena_games % 2:
            raise ValueError("arena_games must be even (half the games with each colour)")
        generations = [generation for generation, _ in self.learning_rate_steps]
        if any(g < 1 for g in generations) or generations != sorted(set(generations)):
            raise ValueError("learning_rate_steps: generations must be >= 1 and increasing")
        if any(rate <= 0 for _, rate in self.learning_rate_steps):
            raise ValueError("learning_rate_steps: every learning rate must be > 0")
        unknown = [name for name in self.pons_files if name not in PONS_FILES]
        if unknown:
            raise ValueError(f"pons_files: unknown {unknown}; known: {list(PONS_FILES)}")
        return self

    def learning_rate_at(self, generation: int) -> float:
        """The learning rate of `generation`'s training (`learning_rate_steps`)."""
        rate = self.learning_rate
        for first, value in self.learning_rate_steps:
            if generation >= first:
                rate = value
        return rate

    @property
    def connect4_board(self) -> Board:
        """`board` parsed."""
        return Board.parse(self.board)

    def boards(self) -> Boards:
        """The game's vectorised rules (`training.az.boards`)."""
        return boards_for(self.game, self.connect4_board)

    @property
    def is_standard(self) -> bool:
        """Connect Four on 7x6, the board of Pons' benchmark."""
        return self.game == "connect4" and self.connect4_board == STANDARD

    @property
    def network(self) -> dict[str, int]:
        """The sizes of the `Connect4PV` network, the board's shape and policy width included."""
        game = self.boards()
        return {"channels": self.channels, "blocks": self.blocks,
                "value_hidden": self.value_hidden, "columns": game.columns, "rows": game.rows,
                "actions": 0 if self.game == "connect4" else game.num_actions}
