"""Per-key budgets over a window: LLM tokens, US dollars of provider cost and MCTS simulations.

A call is checked before it starts (refused while any budget of its key is used up in the current
window) and charged, when it ends, with what its response says it used (`usage_of`). A call that
starts within its budget runs to its end, so a window's use can pass a budget by what one call
(times the calls of that key in flight) used; the next call is then refused until the window
ends. A window opens at a key's first check or charge and lasts `window_s` seconds (the pattern of
the rate limits in `limits.py`). A call that fails is charged nothing: its use is only known
from its response.

`MemoryBudgets` keeps the use in this process; `RedisBudgets` in Redis (a hash per key,
`mcts-mesh:budget:{name}`, expiring with its window), checked by one Lua script and charged by
another, atomically, so replicas share budgets.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.exceptions

from services.orchestrator.access.keys import Budgets

REDIS_PREFIX = "mcts-mesh:budget"
BUDGET_NAMES = ("tokens", "usd", "simulations")

# KEYS[1]: the key's hash. ARGV[1]: the window in ms (opens the window when the hash is new).
# Returns {tokens, usd (string), simulations, ms until the window ends}.
_CHECK = """
local used = redis.call('HMGET', KEYS[1], 'tokens', 'usd', 'simulations')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('HSET', KEYS[1], 'opened', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {tonumber(used[1] or '0'), used[2] or '0', tonumber(used[3] or '0'), ttl}
"""
# KEYS[1]: the key's hash. ARGV: window in ms, tokens, usd, simulations to add.
_CHARGE = """
redis.call('HINCRBY', KEYS[1], 'tokens', ARGV[2])
redis.call('HINCRBYFLOAT', KEYS[1], 'usd', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'simulations', ARGV[4])
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return 1
"""


@dataclass(frozen=True)
class Usage:
    """What one call used: LLM tokens, US dollars, MCTS simulations."""

    tokens: int = 0
    usd: float = 0.0
    simulations: int = 0

    def __bool__(self) -> bool:
        return bool(self.tokens or self.usd or self.simulations)


@dataclass(frozen=True)
class Exceeded:
    """A budget used up: its name ("tokens", "usd", "simulations"), its limit, what the window
    used, and the seconds until the window ends."""

    budget: str
    limit: float
    used: float
    retry_after_s: float


class BudgetUnavailable(Exception):
    """The shared budget store cannot be reached (the message says why, without key data)."""


def exceeded(budgets: Budgets, used: Usage, retry_after_s: float) -> list[Exceeded]:
    """The budgets of `budgets` (0: unlimited) that `used` has reached."""
    return [Exceeded(name, limit, value, retry_after_s)
            for name, limit, value in zip(BUDGET_NAMES,
                                          (budgets.tokens, budgets.usd, budgets.simulations),
                                          (used.tokens, used.usd, used.simulations), strict=True)
            if limit and value >= limit]


class MemoryBudgets:
    """Use per key in this process (a dict per key name, bounded by the number of keys)."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._used: dict[str, tuple[float, Usage]] = {}  # client -> (window end, use)

    def describe(self) -> str:
        return "memory"

    def _window(self, client: str) -> tuple[float, Usage]:
        now = self._clock()
        end, used = self._used.get(client, (0.0, Usage()))
        if now >= end:
            end, used = now + self.window_s, Usage()
            self._used[client] = (end, used)
        return end, used

    async def check(self, client: str, budgets: Budgets) -> list[Exceeded]:
        """The budgets `client` has used up in its window (empty: it may call)."""
        end, used = self._window(client)
        return exceeded(budgets, used, end - self._clock())

    async def charge(self, client: str, usage: Usage) -> None:
        """Adds `usage` to `client`'s window."""
        end, used = self._window(client)
        self._used[client] = (end, Usage(used.tokens + usage.tokens, used.usd + usage.usd,
                                         used.simulations + usage.simulations))


class RedisBudgets:
    """Use per key in Redis, shared by every replica with the same `ORCHESTRATOR_REDIS_URL`."""

    def __init__(self, client, window_s: float) -> None:
        """`client`: a `redis.asyncio.Redis` (the caller owns it)."""
        self.window_s = window_s
        self._window_ms = max(1, round(window_s * 1000))
        self._check = client.register_script(_CHECK)
        self._charge = client.register_script(_CHARGE)

    def describe(self) -> str:
        return "Redis"

    async def check(self, client: str, budgets: Budgets) -> list[Exceeded]:
        """As MemoryBudgets.check (one Lua call). Raises BudgetUnavailable when Redis cannot be
        reached."""
        try:
            tokens, usd, simulations, ttl_ms = await self._check(
                keys=[f"{REDIS_PREFIX}:{{{client}}}"], args=[self._window_ms])
        except (redis.exceptions.RedisError, OSError) as error:
            raise BudgetUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return exceeded(budgets, Usage(int(tokens), float(usd), int(simulations)),
                        int(ttl_ms) / 1000)

    async def charge(self, client: str, usage: Usage) -> None:
        """As MemoryBudgets.charge (one Lua call). Raises BudgetUnavailable when Redis cannot be
        reached."""
        usd = usage.usd if math.isfinite(usage.usd) else 0.0
        try:
            await self._charge(keys=[f"{REDIS_PREFIX}:{{{client}}}"],
                               args=[self._window_ms, usage.tokens, f"{usd:.12f}",
                                     usage.simulations])
        except (redis.exceptions.RedisError, OSError) as error:
            raise BudgetUnavailable(f"Redis: {type(error).__name__}: {error}") from None


def usage_of(response: object) -> Usage:
    """What a response of the orchestrator says its call used:
    - AnswerQueryResponse: `total_tokens` and `cost_usd` (the LLM gateway's usage summed over
      the call's drafts and roles), and the simulations of its search over steps
      (`step_search.statistics.simulations`);
    - SolveProblemResponse: `search_statistics.simulations` (the newest search's; the earlier
      rounds of a multi-round solve are not in the response, so they are not charged);
    - StreamSolveProblemResponse, StreamAnswerQueryResponse: those of its final `response`;
    - anything else: nothing."""
    name = getattr(getattr(response, "DESCRIPTOR", None), "name", "")
    if name in ("StreamSolveProblemResponse", "StreamAnswerQueryResponse"):
        return usage_of(response.response) if response.HasField("response") else Usage()
    if name == "SolveProblemResponse":
        return Usage(simulations=response.search_statistics.simulations)
    if name == "AnswerQueryResponse":
        usd = response.cost_usd if math.isfinite(response.cost_usd) else 0.0
        return Usage(tokens=max(0, response.total_tokens), usd=max(0.0, usd),
                     simulations=response.step_search.statistics.simulations)
    return Usage()
