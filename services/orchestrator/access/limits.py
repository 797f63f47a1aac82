"""Per-client request limits per second, minute and hour: fixed windows that open at a client's
first request (the `INCR` + `PEXPIRE` pattern of Redis' rate-limiting guide).

For each of the three windows a client has a counter that starts with its first request in the
window and expires one window length later. A request passes when every limited window still has
room, and only then counts in all of them, so requests refused by the per-second limit do not use
up the hour. A refused request gets the time until the full window that refused it reopens (the
longest, when several are full): that is the `Retry-After` the caller sees.

Because a window opens at the client's first request rather than on a clock boundary, a burst that
starts when the client is idle gets exactly `limit` requests through per window.

`MemoryRateLimiter` keeps the counters in this process (one orchestrator); `RedisRateLimiter` keeps
them in Redis, checked and counted by one Lua script (atomic), so several replicas share limits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import redis.exceptions

from services.orchestrator.access.keys import RateLimits

REDIS_PREFIX = "mcts-mesh:rate-limit"

# KEYS: one counter per window. ARGV: the limits (0: unlimited), then the window lengths in ms.
# Returns 0 when the request passes (and is counted), else the ms until the fullest window reopens.
_LUA = """
local n = #KEYS
local retry = 0
for i = 1, n do
  local limit = tonumber(ARGV[i])
  if limit > 0 then
    local count = tonumber(redis.call('GET', KEYS[i]) or '0')
    if count >= limit then
      local ttl = redis.call('PTTL', KEYS[i])
      if ttl < 0 then
        ttl = tonumber(ARGV[n + i])
        redis.call('PEXPIRE', KEYS[i], ttl)
      end
      if ttl < 1 then ttl = 1 end
      if ttl > retry then retry = ttl end
    end
  end
end
if retry > 0 then return retry end
for i = 1, n do
  if tonumber(ARGV[i]) > 0 then
    if redis.call('INCR', KEYS[i]) == 1 then
      redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    end
  end
end
return 0
"""


class LimiterUnavailable(Exception):
    """The shared rate-limit store cannot be reached (the message says why, without key data)."""


class MemoryRateLimiter:
    """Counters in this process (a dict per client; clients are key names, so the dict is
    bounded by the number of keys). Not shared between replicas."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # client -> [[window end (s), count] per window]
        self._windows: dict[str, list[list[float]]] = {}

    def describe(self) -> str:
        return "memory"

    async def acquire(self, client: str, limits: RateLimits) -> float:
        """Counts one request of `client`. Returns 0.0 when it may pass, else the seconds until it
        may retry."""
        now = self._clock()
        windows = self._windows.get(client)
        if windows is None:
            windows = self._windows[client] = [[0.0, 0], [0.0, 0], [0.0, 0]]
        retry = 0.0
        for (limit, window_ms), state in zip(limits.windows(), windows, strict=True):
            if not limit:
                continue
            if now >= state[0]:
                state[0], state[1] = now + window_ms / 1000, 0
            if state[1] >= limit:
                retry = max(retry, state[0] - now)
        if retry:
            return retry
        for (limit, _), state in zip(limits.windows(), windows, strict=True):
            if limit:
                state[1] += 1
        return 0.0

    async def aclose(self) -> None:
        return None


class RedisRateLimiter:
    """Counters in Redis (keys `mcts-mesh:rate-limit:{client}:s|m|h`, expiring with their window),
    one Lua script call per request."""

    def __init__(self, client) -> None:
        """`client`: a `redis.asyncio.Redis` (the caller owns it)."""
        self._redis = client
        self._script = client.register_script(_LUA)

    def describe(self) -> str:
        return "Redis"

    async def acquire(self, client: str, limits: RateLimits) -> float:
        """As MemoryRateLimiter.acquire. Raises LimiterUnavailable when Redis cannot be reached."""
        keys = [f"{REDIS_PREFIX}:{{{client}}}:{suffix}" for suffix in ("s", "m", "h")]
        windows = limits.windows()
        args = [limit for limit, _ in windows] + [window_ms for _, window_ms in windows]
        try:
            retry_ms = int(await self._script(keys=keys, args=args))
        except (redis.exceptions.RedisError, OSError) as error:
            raise LimiterUnavailable(f"Redis: {type(error).__name__}: {error}") from None
        return retry_ms / 1000

    async def aclose(self) -> None:
        return None
