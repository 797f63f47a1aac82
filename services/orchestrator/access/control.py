"""The decision made for every call to the orchestrator's API, with no gRPC in it: who is calling
(API key), may they (per-key rate limits), and is there room (admission control).

Order: the credential is checked first (in memory, no I/O); then admission (more than
`max_in_flight` calls running: refused at once, before any rate-limit state is touched); then the
caller's rate limits (one Redis round trip when Redis holds them, none when the caller has no
limits). `admit()` returns None when the call may run, and the caller then owes one `release()`
when it ends.

The index of keys is rebuilt from the store by a background task every `reload_s` seconds (for a
file: only when it changed, one `stat` per period), so the request path never touches the store
and a revocation takes effect within `reload_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from services.orchestrator.access.keys import MAX_KEY_LENGTH, KeyIndex, KeyRecord, RateLimits
from services.orchestrator.access.limits import LimiterUnavailable
from services.orchestrator.metrics import RATE_LIMIT_REJECTIONS

log = logging.getLogger(__name__)

ANONYMOUS = "*anonymous"
"""The rate-limit client of calls without a key (when keys are not required); no key name can be
this (names start with a letter or digit)."""
ADMISSION_RETRY_AFTER_S = 1.0
"""What a call refused by admission control is told to wait: the smallest Retry-After HTTP can
say, and longer than a typical call takes to finish."""
_WARN_EVERY_S = 60.0


class KeyStore(Protocol):
    def describe(self) -> str: ...

    async def read(self) -> list[KeyRecord]: ...

    async def read_if_changed(self) -> list[KeyRecord] | None: ...


class RateLimiter(Protocol):
    def describe(self) -> str: ...

    async def acquire(self, client: str, limits: RateLimits) -> float: ...


@dataclass(frozen=True)
class Credential:
    """What a call presented: `key` (None when no key was sent), or `malformed` when a key was
    sent that cannot be one (empty, over 256 characters, not printable ASCII, not a Bearer)."""

    key: str | None = None
    malformed: bool = False


NO_CREDENTIAL = Credential()
MALFORMED = Credential(malformed=True)


def credential_from_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> Credential:
    """The credential of a call's metadata: `x-api-key`, else `authorization: Bearer <key>`.

    A `x-api-key-bin` / `authorization-bin` entry (how the REST front forwards a header value that
    is no printable ASCII or is too long for metadata) makes the credential malformed."""
    api_key = authorization = None
    for name, value in metadata:
        if name == "x-api-key":
            api_key = value
        elif name == "authorization":
            authorization = value
        elif name in ("x-api-key-bin", "authorization-bin"):
            return MALFORMED
    if api_key is None:
        if authorization is None:
            return NO_CREDENTIAL
        if not isinstance(authorization, str):
            return MALFORMED
        scheme, _, api_key = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return MALFORMED
        api_key = api_key.strip()
    if (not isinstance(api_key, str) or not 0 < len(api_key) <= MAX_KEY_LENGTH
            or not api_key.isascii() or not api_key.isprintable() or " " in api_key):
        return MALFORMED
    return Credential(api_key)


@dataclass(frozen=True)
class Rejection:
    """Why a call was refused. `reason`: "missing_key" and "invalid_key" (UNAUTHENTICATED),
    "rate_limit" and "admission" (RESOURCE_EXHAUSTED); `retry_after_s` for the last two."""

    reason: Literal["missing_key", "invalid_key", "rate_limit", "admission"]
    message: str
    retry_after_s: float = 0.0


MISSING_KEY = Rejection("missing_key", "an API key is required: send it as the x-api-key header "
                        "(gRPC metadata) or as Authorization: Bearer <key>")
INVALID_KEY = Rejection("invalid_key", "invalid API key")


class AccessControl:
    """Authentication, per-key rate limits and admission control for one orchestrator.

    Args:
        require_key: refuse calls without a key (UNAUTHENTICATED). A key that is sent is always
            checked, required or not.
        store: where the key records are (FileKeyStore, RedisKeyStore).
        limiter: the rate-limit counters (MemoryRateLimiter, RedisRateLimiter).
        default_limits: limits of a key without its own, and of calls without a key.
        max_in_flight: calls running at once beyond which a call is refused; 0: no limit.
        reload_s: period of the key index's reload, in seconds.
        closers: awaited by `aclose()` (e.g. the Redis client's `aclose`).
    """

    def __init__(self, *, require_key: bool, store: KeyStore, limiter: RateLimiter,
                 default_limits: RateLimits, max_in_flight: int, reload_s: float = 1.0,
                 closers: tuple = ()) -> None:
        self._require_key = require_key
        self._store = store
        self._limiter = limiter
        self._default_limits = default_limits
        self._max_in_flight = max_in_flight
        self._reload_s = reload_s
        self._closers = closers
        self._index = KeyIndex()
        self._in_flight = 0
        self._reloader: asyncio.Task[None] | None = None
        self._rate_rejections = RATE_LIMIT_REJECTIONS.labels("rate_limit")
        self._admission_rejections = RATE_LIMIT_REJECTIONS.labels("admission")
        self._last_limiter_warning = -_WARN_EVERY_S
        self._reload_failing = False

    @property
    def in_flight(self) -> int:
        """Calls admitted and not released yet."""
        return self._in_flight

    async def start(self) -> None:
        """Loads the keys and starts the reload task.

        Raises:
            ValueError: the store holds something that is not key records.
            redis.RedisError, OSError: the store cannot be read.
        """
        self._index = KeyIndex(await self._store.read_if_changed() or ())
        limits = self._default_limits
        log.info("access: API keys %s (%s: %d keys); default limits %d/s %d/min %d/h "
                 "(0: none; counters in %s); at most %s calls in flight",
                 "required" if self._require_key else "optional", self._store.describe(),
                 len(self._index), limits.per_second, limits.per_minute, limits.per_hour,
                 self._limiter.describe(), self._max_in_flight or "unlimited")
        if self._require_key and not len(self._index):
            log.warning("access: API keys are required and %s holds none: every call is refused "
                        "until `mcts-mesh keys create NAME` adds one", self._store.describe())
        self._reloader = asyncio.create_task(self._reload_forever())

    async def aclose(self) -> None:
        """Stops the reload task and closes what `closers` names."""
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
        for close in self._closers:
            await close()

    def authenticate(self, credential: Credential) -> Rejection | None:
        """Who is calling, and nothing else: None when `credential` may call (a known key, or
        no key while keys are optional), else MISSING_KEY or INVALID_KEY. No admission, no
        rate-limit state, no I/O (one hash and one lookup): the REST front asks it before it
        reads a request's query or body; `admit()` still decides the call."""
        if credential.key is None:
            if credential.malformed:
                return INVALID_KEY
            return MISSING_KEY if self._require_key else None
        return None if self._index.find(credential.key) is not None else INVALID_KEY

    async def admit(self, credential: Credential) -> Rejection | None:
        """None when the call may run (the caller then owes one `release()`), else why not."""
        if credential.key is None:
            if credential.malformed:
                return INVALID_KEY
            if self._require_key:
                return MISSING_KEY
            client, limits = ANONYMOUS, self._default_limits
        else:
            record = self._index.find(credential.key)
            if record is None:
                return INVALID_KEY
            client, limits = record.name, record.limits or self._default_limits
        if self._max_in_flight and self._in_flight >= self._max_in_flight:
            self._admission_rejections.inc()
            return Rejection("admission", f"the orchestrator is serving {self._max_in_flight} "
                             "calls, its limit; retry shortly", ADMISSION_RETRY_AFTER_S)
        self._in_flight += 1
        if limits.unlimited:
            return None
        try:
            retry_after_s = await self._limiter.acquire(client, limits)
        except LimiterUnavailable as error:
            self._warn_limiter(error)
            return None
        except BaseException:
            self._in_flight -= 1
            raise
        if retry_after_s > 0:
            self._in_flight -= 1
            self._rate_rejections.inc()
            return Rejection("rate_limit", "rate limit of this API key exceeded "
                             f"(retry in {retry_after_s:.3f} s)", retry_after_s)
        return None

    def release(self) -> None:
        """One admitted call ended."""
        self._in_flight -= 1

    def _warn_limiter(self, error: LimiterUnavailable) -> None:
        # Fail open: a rate-limit store that is down must not take the API down with it.
        now = time.monotonic()
        if now - self._last_limiter_warning >= _WARN_EVERY_S:
            self._last_limiter_warning = now
            log.warning("access: rate limits not enforced: %s", error)

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reload_s)
            try:
                records = await self._store.read_if_changed()
            except Exception as error:  # noqa: BLE001 - keep serving with the last good index
                if not self._reload_failing:
                    log.warning("access: could not reload API keys from %s (%s); keeping the "
                                "%d loaded", self._store.describe(), error, len(self._index))
                self._reload_failing = True
                continue
            if self._reload_failing:
                log.info("access: API keys readable again from %s", self._store.describe())
                self._reload_failing = False
            if records is not None:
                index = KeyIndex(records)
                if len(index) != len(self._index):
                    log.info("access: %d API keys loaded from %s", len(index),
                             self._store.describe())
                self._index = index
