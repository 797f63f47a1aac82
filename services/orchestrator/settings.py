"""Settings of the orchestrator: where the other services are, the consensus loop's budgets, and the
deadline of each downstream call.

Read once from `ORCHESTRATOR_*` environment variables in `main()` and passed down.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from libs.settings import ChannelSettings, ServiceSettings


class OrchestratorSettings(ServiceSettings, ChannelSettings):
    """The orchestrator's one frozen settings object (env prefix `ORCHESTRATOR_`)."""

    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRATOR_", frozen=True, extra="ignore", populate_by_name=True
    )

    port: int = 50051
    rest_port: int = 8080
    """Port of the REST front; 0 binds a free port, -1 leaves the REST front off."""
    rest_metrics: bool = True
    """Serve `/metrics` on the REST port too (when `metrics_port` is not -1): handy on one
    machine; deploy/k8s turns it off, since the public REST port would show it to anyone while
    the metrics port is open to Prometheus only."""
    rest_max_body_bytes: int = 4 * 1024 * 1024
    """Largest REST request body, in bytes; a larger one is answered 413 without being read."""
    rest_max_json_depth: int = 64
    """Deepest nesting of JSON arrays and objects in a REST body (400 beyond, before parsing)."""
    rest_max_deadline_s: float = 3600.0
    """A REST request's Grpc-Timeout is capped at this many seconds."""
    rest_cors_allowed_origins: tuple[str, ...] = ()
    """Origins whose browsers may call the REST front cross-site, as a JSON list
    (`["https://app.example"]`; `["*"]` for any); empty turns CORS off."""
    rest_cors_max_age_s: int = 600
    """Seconds a browser may cache a CORS preflight's answer."""
    rest_allowed_hosts: tuple[str, ...] | None = None
    """Host names the REST front answers, as a JSON list (`["api.example", "*.example.com"]`;
    `["*"]` for any); others get 421. Unset: localhost, 127.0.0.1 and [::1] when `host` is a
    loopback address (no DNS rebinding), any host otherwise."""
    rest_allowed_origins: tuple[str, ...] = ()
    """Origins whose cross-site requests the REST front serves besides the CORS allowed origins;
    a request with any other Origin (not the request's own) is refused 403."""
    rest_max_query_bytes: int = 8 * 1024
    """Longest REST query string, in bytes (414 beyond, not parsed)."""
    rest_max_query_parameters: int = 64
    """Most parameters of a REST query string (400 beyond, not parsed)."""
    rest_max_head_bytes: int = 128 * 1024
    """Most bytes of a REST request's target and headers together (414/431 beyond)."""
    rest_max_headers: int = 100
    """Most headers of a REST request (431 beyond)."""
    rest_head_timeout_s: float = 10.0
    """Seconds a REST request's head may take to arrive (408 beyond; a silent connection is
    closed)."""
    rest_console: bool = True
    """Serve the web console (static pages, no key needed to load them; the API calls they make
    carry the key the user enters) at `/console/` on the REST port."""
    rest_jaeger_ui_url: str = ""
    """Address of a Jaeger UI (`http://localhost:16686`) that the console links each answer's
    trace to (`<url>/trace/<trace id>`); empty: the console shows the trace id without a link."""

    mcts_target: str = "127.0.0.1:50052"
    """gRPC address (host:port) of the mcts service; `mcts-mesh up` sets it."""
    neural_target: str = "127.0.0.1:50053"
    """gRPC address of the neural service; `mcts-mesh up` sets it."""
    retrieval_target: str = "127.0.0.1:50054"
    """gRPC address of the retrieval service; `mcts-mesh up` sets it."""
    llm_target: str = "127.0.0.1:50055"
    """gRPC address of the llm service; `mcts-mesh up` sets it."""

    default_simulations: int = 20_000
    """MCTS simulations of the first search when a request leaves `simulations` unset."""
    max_simulations: int = 10_000_000
    """Ceiling of the simulations a later iteration may double up to."""
    max_iterations: int = 3
    """Consensus-loop iterations when a request leaves `max_iterations` unset."""
    text_max_iterations: int = 3
    """Consensus-loop iterations of a text query: each samples another batch of drafts while
    their vote is below `text_agreement` (self-consistency); one with the offline provider."""
    text_sample_count: int = 5
    """Drafts sampled per iteration (k of self-consistency, Wang et al. 2022) when a request
    leaves `sample_count` unset; 1 drafts once at temperature 0, with no vote."""
    text_temperature: float = 0.7
    """Sampling temperature of the drafts when a request leaves `temperature` unset, 0..2."""
    text_agreement: float = 0.6
    """Vote share of the winning answer that ends sampling, in (0, 1]."""
    text_refine_max_rounds: int = 3
    """Critique-and-revise rounds of the refine role at most (1..10) when a request leaves
    `max_refinements` unset."""
    text_decompose_max_parts: int = 4
    """Sub-questions the decompose role answers at most (1..10)."""
    text_step_branching: int = 3
    """Search over steps: next steps proposed per leaf (1..8) when a request leaves
    `step_branching` unset."""
    text_max_steps: int = 6
    """Search over steps: steps per trajectory at most (1..20) when a request leaves `max_steps`
    unset."""
    checker_max_nodes: int = 2_000_000
    """Node budget of the exact checker's solver per request (negamax nodes), at most."""
    checker_time_budget_ms: float = 500.0
    """Milliseconds of exact solving per request at most (the request's deadline shortens it);
    about what 2,000,000 nodes take on an idle core here."""
    checker_min_moves: int = 8
    """Below this many moves played the checker solves with `checker_early_nodes` only: no Pons
    position with fewer than 8 moves finishes within 2,000,000 nodes
    (`experiments/2026-11-24-checker-budget/`)."""
    checker_early_nodes: int = 2_000
    """Node budget below `checker_min_moves` moves (0: only immediate wins, forced blocks and
    double threats there). Unfinished, a solve still proves a winning column often: 13 of the
    34 positions with fewer than 8 moves in `bench/load.py --connect4-early`, at about 0.7 ms each;
    the checker then answers alone, before the search and the network."""
    checker_base_nodes: int = 2_000
    """Node budget at `checker_min_moves` moves, 8x per further move up to `checker_max_nodes`
    (2,000 nodes at 8 moves, 16,000 at 9, 128,000 at 10, 1,024,000 at 11, 2,000,000 from 12)."""
    checker_score_min_moves: int = 10
    """From this many moves played on, a solve that proves a column winning goes on for the exact
    score (how fast the win comes); below, it stops at the first winning column, whose proof
    already gives the move and the outcome (WIN). On `bench/load.py --connect4-early`'s positions
    this halves the solver's CPU with the same positions proved (0: always go on)."""
    checker_first: bool = True
    """Run the checker before the search and the network where its node budget is at most
    `checker_first_max_nodes`, and answer from it alone when it proves the move with the
    position's value (same column, value and outcome; the reply's votes hold the checker's only).
    False: every agent of the first round runs side by side."""
    checker_first_max_nodes: int = 16_000
    """Largest node budget (the budget at 9 moves by default, a few ms) at which the checker runs
    first; an unproved position waits that long for the other agents to start."""
    search_close_ratio: float = 0.1
    """While the search and the network disagree, another round of search runs only if the
    network's column has at least this share of the visits of the search's most visited column
    (the CLOSE criterion: `agents/mcts.py`), in [0, 1]; far behind, more simulations rarely bring
    agreement (`experiments/2026-11-26-search-close-ratio/`). 0 searches again on every
    disagreement, up to `max_iterations`."""
    solver_time_budget_s: float = 10.0
    """Seconds the exact puzzle solver (Sudoku, mazes) may take per request (the request's
    deadline shortens it)."""
    neural_model: str = ""
    """Model of the neural service to ask; empty means its default model."""
    hrm_model: str = ""
    """HRM model of the neural service for Sudoku and mazes; empty means, per puzzle, the HRM
    model whose task matches the grid ("sudoku-6x6", "maze-9x9") and whose recorded training
    blank count is nearest the puzzle's (ties: the better held-out exact accuracy, then name)."""
    trm_model: str = ""
    """TRM model for Sudoku and mazes, as `hrm_model`."""
    reasoning_halting_mode: Literal["paper", "act"] = "paper"
    """How HRM and TRM decide how many segments to run: "paper" (a fixed number, as the papers
    evaluate) or "act" (stop when the halting head says halt)."""
    reasoning_max_segments: int | None = None
    """Segments at most per Solve call, 1..64; None means each model's own maximum."""
    reasoning_models_ttl_s: float = 30.0
    """Seconds a listing of the neural service's models is reused before it is listed again
    (a newly loaded HRM/TRM model is used after at most this long)."""

    routing_log_path: str = ""
    """JSON-lines file that every request's routing decisions and outcome are appended to
    (`services.orchestrator.routing.log`), the training data of `mcts-mesh train router`; empty
    (the default) logs nothing: the log holds the queries, and a mesh under load would write a
    line per request."""
    routing_log_max_bytes: int = 64 * 1024 * 1024
    """Size in bytes at which the routing log is rotated (`routing_log_backups` older files are
    kept), >= 1,024."""
    routing_log_backups: int = 3
    """Rotated routing log files kept, >= 1."""
    router_model: str = ""
    """The neural service's meta-controller model (`mcts-mesh train router` writes
    `models/router-connect4`) asked to choose the first round's agents of a Connect Four request;
    empty (the default) leaves routing to the rules."""
    router_threshold: float = 0.45
    """Smallest probability of the meta-controller's choice that is followed, in [0, 1]; below
    it the rules decide (the response says which did). At 19-37 plies the shipped
    router-connect4 splits 0.99 between the checker with the network on the full and on the
    quick budget (the larger of the two 0.47-0.61), so 0.45 follows it there (the rules add the
    search); on 180 positions of the train split it kept the same 67 outcomes there, all exact as
    the rules' were, and cut that range's part of the mean latency from 10.5 to 7.5 ms."""
    router_network_check_below: float = 0.99
    """A followed route that runs the search without the network gets the network too when its
    probability is below this, in [0, 1]: the rules' check (search again with twice the
    simulations while search and network disagree) then stays where the model is less sure;
    0 never adds it (`routing.LearnedRouter`). The shipped router-connect4 is below 0.99 where it
    chooses the checker's tactics with the search (0-8 plies, p 0.96) and at 17-18 and 38-41
    plies, at or above it where it chooses the search alone at 10-16 plies (p 1.00)."""
    router_deadline_ms: float = 200.0
    """Milliseconds one PredictRoute (or PredictTextRoute) call may take; past it (or on any
    error) the rules decide."""
    text_router_model: str = ""
    """The neural service's text router (`mcts-mesh train router --text` writes
    `models/router-text`) asked which role answers a text query that names none; empty (the
    default: no text router is shipped, its labels need a language model's answers) leaves it to
    the rules (self-consistent drafts)."""
    text_router_threshold: float = 0.6
    """Smallest probability of the text router's choice that is followed, in [0, 1]; below it
    the rules decide (the response's route_decider says which did)."""
    text_router_search_iterations: int = 20
    """Simulations of the search over reasoning steps when the text router chooses it (the
    request, naming no role, gives no mcts_iterations), 1..10,000."""

    connect_timeout_s: float = 1.0
    """Seconds a connection attempt to another service, or the REST front's to this orchestrator's
    gRPC port, may take; a service that is down costs a request at most this long (then its agent
    fails UNAVAILABLE and the others answer)."""
    request_deadline_s: float = 60.0
    """Budget of a request whose caller set no deadline, in seconds."""
    mcts_deadline_s: float = 30.0
    """Seconds the mcts agent's searches of one request may take in all, from the request's start
    (the request's deadline shortens it): every round's MctsService.Search carries that one
    deadline, and the mcts service starts its waiting searches earliest deadline first."""
    neural_deadline_s: float = 5.0
    """Deadline of one NeuralService.EvaluatePositions or ListModels call, in seconds."""
    reasoning_deadline_s: float = 10.0
    """Deadline of one NeuralService.Solve call (HRM, TRM), in seconds."""
    retrieval_deadline_s: float = 10.0
    """Deadline of one RetrievalService.SearchDocuments call, in seconds."""
    ingest_deadline_s: float = 600.0
    """Deadline of one RetrievalService.IngestDocuments call (embedding), in seconds."""
    llm_deadline_s: float = 60.0
    """Deadline of one LlmService.Generate call, in seconds."""

    default_collection: str = "default"
    """Retrieval collection of a query that names none."""
    default_top_k: int = 4
    """Passages retrieved for a query that leaves `top_k` unset."""
    max_answer_tokens: int = 512
    """Upper bound on the tokens of a drafted answer."""

    require_api_key: bool = False
    """Refuse calls that carry no API key (UNAUTHENTICATED / HTTP 401); `mcts-mesh keys` makes
    keys. A key that is sent is checked either way."""
    api_keys_file: str = ""
    """JSON file of API key hashes (`mcts-mesh keys create` writes it; in Kubernetes a mounted
    Secret), re-read within `api_keys_reload_s` of a change. Empty: the Redis hash
    `mcts-mesh:api-keys` when `redis_url` is set, else `var/orchestrator/api-keys.json`."""
    api_keys_reload_s: float = 1.0
    """Seconds between two checks of the key store for changes (a revocation's delay)."""
    redis_url: SecretStr | None = None
    """Redis (`redis://[:password@]host:port/db`) for the rate-limit counters, shared by every
    replica, and for the keys unless `api_keys_file` is set; unset: counters in this process."""
    rate_limit_per_second: int = 0
    """Calls a key may make per second (a key may carry its own limits); 0: no limit. Calls
    without a key (keys not required) share one such budget."""
    rate_limit_per_minute: int = 0
    """As `rate_limit_per_second`, per minute."""
    rate_limit_per_hour: int = 0
    """As `rate_limit_per_second`, per hour."""
    max_in_flight: int = 64
    """Calls running at once beyond which a call is refused at once with RESOURCE_EXHAUSTED /
    HTTP 429 and Retry-After (admission control); 0: no limit."""
    max_running_solves: int = 10
    """SolveProblem calls running their consensus loop at once; the others wait for one to end,
    in arrival order, within their deadline (up to `max_in_flight` calls in all); 0: no limit.
    Running every solve at once shares the cores among all of them and stretches the tail: on the
    load bench's early Connect Four positions at concurrency 32, 10 kept the requests/s and cut the
    p99 from 319-456 ms to 209-224 ms. AnswerQuery calls hold one of these slots too."""
    max_in_flight_per_key: int = 32
    """Calls of one API key running at once beyond which its next call is refused with
    RESOURCE_EXHAUSTED / HTTP 429 (reason KEY_TOO_MANY_REQUESTS_IN_FLIGHT), so one key cannot hold
    every slot of `max_in_flight`; a key's record may set its own (`keys create --max-in-flight`).
    Calls without a key (keys not required) are bounded by `max_in_flight` only; 0: no limit."""
    max_deadline_s: float = 600.0
    """Longest any call of the API may run, in seconds, streams included: a call without a
    deadline, or with a longer one, ends DEADLINE_EXCEEDED at this (its handler cancelled).
    At least `request_deadline_s`."""
    budget_window_s: float = 3600.0
    """Length of a key's budget window, in seconds; it opens at the key's first call."""
    budget_tokens: int = 0
    """LLM tokens (prompt and completion) a key may use per window, as its AnswerQuery responses
    report them (`total_tokens`); a key's record may set its own budgets. Calls without a key
    (keys not required) share one such budget. 0: no budget."""
    budget_usd: float = 0.0
    """US dollars of provider cost a key may use per window (`cost_usd` of its responses);
    0: no budget."""
    budget_simulations: int = 0
    """MCTS simulations a key may use per window (the search statistics of its responses);
    0: no budget."""
    rate_limit_redis_failure: Literal["fail_open", "fail_closed"] = "fail_open"
    """Rate limits while Redis cannot be reached: "fail_open" lets calls through unlimited (a
    warning a minute), "fail_closed" refuses them UNAVAILABLE / HTTP 503. `/ready` lists Redis."""
    budget_redis_failure: Literal["fail_open", "fail_closed"] = "fail_closed"
    """Budgets while Redis cannot be reached, as `rate_limit_redis_failure`: by default a key
    with budgets is refused (its use cannot be checked)."""
    run_store_url: str = "sqlite:///var/runs.db"
    """Database of the durable runs (RunService): `sqlite:///PATH` (a file, relative to the working
    directory, created with its folder) or `postgresql://USER:PASSWORD@HOST:PORT/DB` (psycopg 3),
    which several orchestrator replicas share as one queue. Migrated at start-up; a corrupt file
    or a newer schema stops the start with an error naming it, nothing overwritten."""
    run_retention: timedelta = timedelta(days=7)
    """How long finished runs and batches are kept after they end before they are purged, as
    seconds or an ISO 8601 duration (`P7D`, `PT12H`); 0: kept forever."""
    run_lease_s: float = 30.0
    """Seconds a worker's lease on a run lasts; renewed while it works, so a run whose worker died
    is taken again by any replica this long after its last renewal."""
    run_max_attempts: int = 5
    """Attempts a run gets at most: a run whose lease expired this many times (its worker was
    killed or lost the store mid-run each time, e.g. a request that crashes the process) ends
    FAILED with ABORTED at its next lease instead of being executed again; 0: no cap."""
    run_workers: int = 12
    """Runs each orchestrator executes at once (its workers leasing from the store); 0: none
    (this replica only accepts and serves runs). They pass the same admission as synchronous
    calls: a little more than `max_running_solves` keeps every consensus-loop slot busy during
    a batch (a worker spends a few milliseconds in the store between runs) while synchronous
    calls wait behind at most the few runs beyond it."""
    batch_max_items: int = 10_000
    """Most runs in one batch (CreateBatch beyond: INVALID_ARGUMENT naming this limit)."""
    batch_max_bytes: int = 4 * 1024 * 1024
    """Most bytes of a batch's serialized requests (beyond: INVALID_ARGUMENT naming this limit)."""

    @field_validator("rest_jaeger_ui_url")
    @classmethod
    def _ui_url(cls, value: str) -> str:
        """An http(s) address without its trailing slash, or empty."""
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"rest_jaeger_ui_url must start with http:// or https://, got "
                             f"{value!r}")
        return value.rstrip("/")

    @field_validator("run_retention", mode="before")
    @classmethod
    def _seconds(cls, value: object) -> object:
        """A number of seconds written as a string ("3600") is read as such."""
        if isinstance(value, str) and value.strip().replace(".", "", 1).isdigit():
            return float(value)
        return value

    @model_validator(mode="after")
    def _ranges(self) -> OrchestratorSettings:
        if not 1 <= self.default_simulations <= self.max_simulations <= 10_000_000:
            raise ValueError("need 1 <= default_simulations <= max_simulations <= 10,000,000")
        if not 1 <= self.max_iterations <= 10 or not 1 <= self.text_max_iterations <= 10:
            raise ValueError("max_iterations and text_max_iterations must be in 1..10")
        if min(self.rest_max_query_bytes, self.rest_max_query_parameters,
               self.rest_max_head_bytes, self.rest_max_headers) < 1:
            raise ValueError("the REST front's query and head limits must be >= 1")
        if self.rest_max_body_bytes < 1 or not 1 <= self.rest_max_json_depth <= 512:
            raise ValueError("need rest_max_body_bytes >= 1 and rest_max_json_depth in 1..512")
        if not 1 <= self.text_sample_count <= 20 or not 0 <= self.text_temperature <= 2 \
                or not 0 < self.text_agreement <= 1:
            raise ValueError("need text_sample_count in 1..20, text_temperature in 0..2 and "
                             "text_agreement in (0, 1]")
        if not (1 <= self.text_refine_max_rounds <= 10 and 1 <= self.text_decompose_max_parts
                <= 10 and 1 <= self.text_step_branching <= 8 and 1 <= self.text_max_steps <= 20):
            raise ValueError("need text_refine_max_rounds and text_decompose_max_parts in 1..10, "
                             "text_step_branching in 1..8 and text_max_steps in 1..20")
        if self.checker_max_nodes < 0 or self.checker_min_moves < 0 \
                or self.checker_early_nodes < 0 or self.checker_score_min_moves < 0:
            raise ValueError("checker_max_nodes, checker_min_moves, checker_early_nodes and "
                             "checker_score_min_moves must be >= 0")
        if not 0.0 <= self.search_close_ratio <= 1.0:
            raise ValueError("search_close_ratio must be in [0, 1]")
        if self.checker_first_max_nodes < 0:
            raise ValueError("checker_first_max_nodes must be >= 0")
        if self.checker_base_nodes < 1 or self.checker_time_budget_ms <= 0:
            raise ValueError("checker_base_nodes must be >= 1, checker_time_budget_ms > 0")
        return self

    @model_validator(mode="after")
    def _limits(self) -> OrchestratorSettings:
        if not 1 <= self.default_top_k <= 20:
            raise ValueError("default_top_k must be in 1..20")
        if self.reasoning_max_segments is not None and \
                not 1 <= self.reasoning_max_segments <= 64:
            raise ValueError("reasoning_max_segments must be in 1..64")
        if self.reasoning_models_ttl_s < 0:
            raise ValueError("reasoning_models_ttl_s must be >= 0")
        if min(self.rate_limit_per_second, self.rate_limit_per_minute, self.rate_limit_per_hour,
               self.max_in_flight, self.max_running_solves, self.max_in_flight_per_key,
               self.budget_tokens, self.budget_simulations) < 0 \
                or not 0 <= self.budget_usd < float("inf"):
            raise ValueError("rate limits, max_in_flight, max_in_flight_per_key, "
                             "max_running_solves and budgets must be >= 0 (0: no limit)")
        if self.budget_window_s <= 0 or not self.request_deadline_s <= self.max_deadline_s:
            raise ValueError("need budget_window_s > 0 and request_deadline_s <= max_deadline_s")
        if self.api_keys_reload_s <= 0:
            raise ValueError("api_keys_reload_s must be positive")
        if not 0.0 <= self.router_threshold <= 1.0 or self.router_deadline_ms <= 0 \
                or not 0.0 <= self.router_network_check_below <= 1.0:
            raise ValueError("need router_threshold and router_network_check_below in [0, 1] "
                             "and router_deadline_ms > 0")
        if not 0.0 <= self.text_router_threshold <= 1.0 \
                or not 1 <= self.text_router_search_iterations <= 10_000:
            raise ValueError("need text_router_threshold in [0, 1] and "
                             "text_router_search_iterations in 1..10,000")
        if self.routing_log_max_bytes < 1024 or self.routing_log_backups < 1:
            raise ValueError("need routing_log_max_bytes >= 1024 and routing_log_backups >= 1")
        deadlines = (self.request_deadline_s, self.mcts_deadline_s, self.neural_deadline_s,
                     self.retrieval_deadline_s, self.llm_deadline_s, self.ingest_deadline_s,
                     self.solver_time_budget_s, self.reasoning_deadline_s,
                     self.rest_max_deadline_s, self.connect_timeout_s, self.rest_head_timeout_s)
        if min(deadlines) <= 0:
            raise ValueError("every deadline must be positive")
        if self.run_lease_s <= 0 or self.run_workers < 0 or self.run_max_attempts < 0 \
                or self.batch_max_items < 1 \
                or self.batch_max_bytes < 1 or self.run_retention.total_seconds() < 0:
            raise ValueError("need run_lease_s > 0, run_workers >= 0, run_max_attempts >= 0, "
                             "batch_max_items >= 1, "
                             "batch_max_bytes >= 1 and run_retention >= 0")
        return self
