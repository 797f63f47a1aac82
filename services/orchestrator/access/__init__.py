"""Access control of the orchestrator's API, for gRPC and REST alike (the REST front forwards
`x-api-key` and `Authorization` as gRPC metadata, so one server interceptor decides).

- `keys`: API keys, made once, stored as SHA-256 hashes (a file or Redis), with their scopes,
  allowed collections, caps and budgets.
- `scopes`: the scope each method needs, and the collection a request names.
- `limits`: per-key rate limits per second, minute and hour (memory or Redis).
- `budgets`: per-key budgets of tokens, US dollars and MCTS simulations per window (memory or
  Redis), and what a response says its call used.
- `redis_state`: whether Redis answers, for `/ready`.
- `control`: the decision per call (key, scope, collection, admission overall and per key, rate
  limits, budgets), no gRPC in it.
- `interceptor`: the gRPC server interceptor that applies it, charges budgets and caps every
  call's deadline.

`open_access(settings)` builds all of it from the orchestrator's settings; `key_store(settings,
redis_client)` is the store `mcts-mesh keys` edits.
"""

from __future__ import annotations

import redis.asyncio

from services.orchestrator.access.budgets import MemoryBudgets, RedisBudgets
from services.orchestrator.access.control import AccessControl
from services.orchestrator.access.keys import Budgets, FileKeyStore, RateLimits, RedisKeyStore
from services.orchestrator.access.limits import MemoryRateLimiter, RedisRateLimiter
from services.orchestrator.access.redis_state import RedisState
from services.orchestrator.settings import OrchestratorSettings

DEFAULT_KEYS_FILE = "var/orchestrator/api-keys.json"
REDIS_TIMEOUT_S = 0.5
"""Connect and socket timeout of the Redis client: a Redis that stalls costs a call at most this
(then each limit fails open or closed as the settings say, and a warning is logged once a
minute)."""


def redis_client(settings: OrchestratorSettings):
    """A `redis.asyncio.Redis` for `settings.redis_url`, or None when it is unset."""
    if settings.redis_url is None:
        return None
    return redis.asyncio.from_url(settings.redis_url.get_secret_value(),
                                  socket_timeout=REDIS_TIMEOUT_S,
                                  socket_connect_timeout=REDIS_TIMEOUT_S)


def key_store(settings: OrchestratorSettings, client) -> FileKeyStore | RedisKeyStore:
    """`api_keys_file` when set; else the Redis hash when `client` is given; else the default
    file `var/orchestrator/api-keys.json`."""
    if settings.api_keys_file:
        return FileKeyStore(settings.api_keys_file)
    if client is not None:
        return RedisKeyStore(client)
    return FileKeyStore(DEFAULT_KEYS_FILE)


async def open_access(settings: OrchestratorSettings) -> AccessControl:
    """The started AccessControl for `settings`; `aclose()` stops it and closes its Redis client.

    Raises:
        ValueError: the key store holds something that is not key records.
        redis.RedisError, OSError: the key store cannot be read.
    """
    client = redis_client(settings)
    window_s = settings.budget_window_s
    control = AccessControl(
        require_key=settings.require_api_key,
        store=key_store(settings, client),
        limiter=RedisRateLimiter(client) if client is not None else MemoryRateLimiter(),
        default_limits=RateLimits(settings.rate_limit_per_second, settings.rate_limit_per_minute,
                                  settings.rate_limit_per_hour),
        max_in_flight=settings.max_in_flight,
        reload_s=settings.api_keys_reload_s,
        closers=(client.aclose,) if client is not None else (),
        max_in_flight_per_key=settings.max_in_flight_per_key,
        budgets=RedisBudgets(client, window_s) if client is not None else MemoryBudgets(window_s),
        default_budgets=Budgets(settings.budget_tokens, settings.budget_usd,
                                settings.budget_simulations).check(),
        rate_limit_failure=settings.rate_limit_redis_failure,
        budget_failure=settings.budget_redis_failure,
        default_collection=settings.default_collection,
        redis_state=(RedisState(settings.rate_limit_redis_failure, settings.budget_redis_failure)
                     if client is not None else None),
        ping=client.ping if client is not None else None)
    try:
        await control.start()
    except BaseException:
        await control.aclose()
        raise
    return control
