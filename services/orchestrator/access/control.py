"""The decision made for every call to the orchestrator's API, with no gRPC in it: who is calling
(API key), may they (scopes, collections, per-key rate limits and budgets), and is there room
(admission control, overall and per key).

Order (`enter`): the credential is checked first (in memory, no I/O); then the method's scope and
the request's collection (in memory); then admission (more than `max_in_flight` calls running, or
more than the key's own cap: refused at once, before any rate-limit state is touched); then the
caller's rate limits and budgets (one Redis round trip each when Redis holds them, none when the
caller has none). `enter()` returns an `Admitted` when the call may run, and the caller then owes
one `leave()` when it ends, after `charge()` with the call's response when there is one.

Redis unreachable: rate limits follow `rate_limit_failure` ("fail_open": not enforced, a warning a
minute, as before; "fail_closed": the call is refused UNAVAILABLE), budgets `budget_failure`
(default "fail_closed"); `report()` says so for `/ready`.

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
from dataclasses import dataclass, field
from typing import Literal, Protocol

from services.orchestrator.access.budgets import BudgetUnavailable, Exceeded, Usage, usage_of
from services.orchestrator.access.keys import (
    MAX_KEY_LENGTH,
    Budgets,
    Caller,
    KeyIndex,
    KeyRecord,
    RateLimits,
)
from services.orchestrator.access.limits import LimiterUnavailable
from services.orchestrator.access.redis_state import RedisState
from services.orchestrator.access.scopes import collection_of, missing_scope
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


class BudgetStore(Protocol):
    window_s: float

    def describe(self) -> str: ...

    async def check(self, client: str, budgets: Budgets) -> list[Exceeded]: ...

    async def charge(self, client: str, usage: Usage) -> None: ...


FailurePolicy = Literal["fail_open", "fail_closed"]


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
    "scope" and "collection" (PERMISSION_DENIED), "rate_limit", "admission", "key_in_flight" and
    "budget" (RESOURCE_EXHAUSTED), "store_unavailable" (UNAVAILABLE: Redis unreachable and the
    limit fails closed); `retry_after_s` for the last five. `metadata`: more ErrorInfo metadata
    (e.g. the scope missing); `violations`: QuotaFailure violations (subject, description)."""

    reason: Literal["missing_key", "invalid_key", "scope", "collection", "rate_limit",
                    "admission", "key_in_flight", "budget", "store_unavailable"]
    message: str
    retry_after_s: float = 0.0
    metadata: tuple[tuple[str, str], ...] = ()
    violations: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class Admitted:
    """A call let in: its rate-limit client (the key's name, or ANONYMOUS), its key record (None
    without a key), and the budgets it is charged against (None: none)."""

    client: str
    record: KeyRecord | None
    budgets: Budgets | None = None
    counted_per_key: bool = False
    released: bool = field(default=False, repr=False)


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
        max_in_flight_per_key: calls of one key running at once beyond which its next call is
            refused (a key's record may set its own); 0: no limit. Calls without a key are
            bounded by `max_in_flight` only.
        budgets: where the use per key is kept (MemoryBudgets, RedisBudgets); None: no budgets.
        default_budgets: budgets of a key without its own, and of calls without a key.
        rate_limit_failure, budget_failure: what to do while Redis is unreachable: "fail_open"
            (let the call through, a warning a minute) or "fail_closed" (refuse it UNAVAILABLE).
        default_collection: the collection a request with an empty `collection` field names.
        redis_state: where Redis' reachability is kept for `/ready` (None: no Redis).
        ping: an awaitable PING of Redis, run once per `reload_s` to keep `redis_state` fresh.
    """

    def __init__(self, *, require_key: bool, store: KeyStore, limiter: RateLimiter,
                 default_limits: RateLimits, max_in_flight: int, reload_s: float = 1.0,
                 closers: tuple = (), max_in_flight_per_key: int = 0,
                 budgets: BudgetStore | None = None, default_budgets: Budgets | None = None,
                 rate_limit_failure: FailurePolicy = "fail_open",
                 budget_failure: FailurePolicy = "fail_closed",
                 default_collection: str = "default", redis_state: RedisState | None = None,
                 ping=None) -> None:
        self._require_key = require_key
        self._store = store
        self._limiter = limiter
        self._default_limits = default_limits
        self._max_in_flight = max_in_flight
        self._reload_s = reload_s
        self._closers = closers
        self._max_in_flight_per_key = max_in_flight_per_key
        self._budgets = budgets
        self._default_budgets = default_budgets or Budgets()
        self._rate_limit_failure = rate_limit_failure
        self._budget_failure = budget_failure
        self._default_collection = default_collection
        self._redis_state = redis_state
        self._ping = ping
        self._per_key: dict[str, int] = {}
        self._legacy: list[Admitted] = []
        self._index = KeyIndex()
        self._in_flight = 0
        self._reloader: asyncio.Task[None] | None = None
        self._rate_rejections = RATE_LIMIT_REJECTIONS.labels("rate_limit")
        self._admission_rejections = RATE_LIMIT_REJECTIONS.labels("admission")
        self._key_rejections = RATE_LIMIT_REJECTIONS.labels("key_in_flight")
        self._budget_rejections = RATE_LIMIT_REJECTIONS.labels("budget")
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
        budgets = self._default_budgets
        log.info("access: API keys %s (%s: %d keys); default limits %d/s %d/min %d/h "
                 "(0: none; counters in %s); at most %s calls in flight, %s per key; default "
                 "budgets %d tokens, $%g, %d simulations per window (0: none; in %s)",
                 "required" if self._require_key else "optional", self._store.describe(),
                 len(self._index), limits.per_second, limits.per_minute, limits.per_hour,
                 self._limiter.describe(), self._max_in_flight or "unlimited",
                 self._max_in_flight_per_key or "unlimited", budgets.tokens, budgets.usd,
                 budgets.simulations,
                 self._budgets.describe() if self._budgets is not None else "nowhere")
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

    def in_flight_of(self, client: str) -> int:
        """Calls of `client` (a key's name) admitted and not released yet."""
        return self._per_key.get(client, 0)

    def report(self) -> list[dict[str, object]]:
        """What `/ready` lists about access control's own dependency: Redis' entry (see
        `RedisState.as_json`) when Redis holds limits, budgets or keys; else nothing."""
        return [self._redis_state.as_json()] if self._redis_state is not None else []

    def _identify(self, credential: Credential) -> Rejection | tuple[str, KeyRecord | None]:
        if credential.key is None:
            if credential.malformed:
                return INVALID_KEY
            if self._require_key:
                return MISSING_KEY
            return ANONYMOUS, None
        record = self._index.find(credential.key)
        if record is None:
            return INVALID_KEY
        return record.name, record

    def check_request(self, admitted: Admitted, request: object) -> Rejection | None:
        """None when `admitted`'s key may name the collection `request` names (see
        `scopes.collection_of`; an empty one is the default collection), else why not. Streams
        check each message with it."""
        record = admitted.record
        if record is None or record.collections is None:
            return None
        collection = collection_of(request)
        if collection is None:
            return None
        collection = collection or self._default_collection
        if collection in record.collections:
            return None
        return Rejection("collection", f"this API key may not use the collection "
                         f"{collection!r}", metadata=(("collection", collection),))

    async def enter(self, credential: Credential, method: str = "",
                    request: object = None) -> Admitted | Rejection:
        """An `Admitted` when the call of `method` (a full gRPC method name; "" checks no scope)
        may run (the caller then owes one `leave()`), else why not. `request`: the request
        message of a unary-request call, whose collection is checked (None: none)."""
        found = self._identify(credential)
        if isinstance(found, Rejection):
            return found
        return await self._enter(*found, method, request)

    async def enter_as(self, owner: str, method: str,
                       request: object = None) -> Admitted | Rejection:
        """`enter` for the key named `owner` ("" for no key), without its credential: a durable
        run's worker executing that key's run. INVALID_KEY when no such key is stored now."""
        if not owner:
            return MISSING_KEY if self._require_key else await self._enter(
                ANONYMOUS, None, method, request)
        record = self._index.named(owner)
        return INVALID_KEY if record is None else await self._enter(owner, record, method,
                                                                    request)

    def caller(self, credential: Credential) -> Caller | Rejection:
        """Who `credential` is (for resources a key owns), else MISSING_KEY or INVALID_KEY."""
        found = self._identify(credential)
        if isinstance(found, Rejection):
            return found
        client, record = found
        return Caller("" if record is None else client, record)

    async def _enter(self, client: str, record: KeyRecord | None, method: str,
                     request: object) -> Admitted | Rejection:
        if method and record is not None and (scope := missing_scope(record.scopes, method)):
            return Rejection("scope", f"this API key lacks the scope {scope!r} that "
                             f"{method.rsplit('/', 1)[-1]} needs",
                             metadata=(("scope", scope), ("method", method)))
        admitted = Admitted(client, record)
        if request is not None and (denied := self.check_request(admitted, request)):
            return denied
        refused = self._count_in(admitted)
        if refused is not None:
            return refused
        try:
            refused = await self._check_limits(admitted)
        except BaseException:
            self.leave(admitted)
            raise
        if refused is not None:
            self.leave(admitted)
            return refused
        return admitted

    def _count_in(self, admitted: Admitted) -> Rejection | None:
        """Admission: counts the call in, or says why there is no room."""
        if self._max_in_flight and self._in_flight >= self._max_in_flight:
            self._admission_rejections.inc()
            return Rejection("admission", f"the orchestrator is serving {self._max_in_flight} "
                             "calls, its limit; retry shortly", ADMISSION_RETRY_AFTER_S)
        record = admitted.record
        if record is not None:
            cap = record.max_in_flight if record.max_in_flight is not None \
                else self._max_in_flight_per_key
            running = self._per_key.get(admitted.client, 0)
            if cap and running >= cap:
                self._key_rejections.inc()
                return Rejection("key_in_flight", f"this API key has {cap} calls running, its "
                                 "limit; retry when one ends", ADMISSION_RETRY_AFTER_S)
            self._per_key[admitted.client] = running + 1
            admitted.counted_per_key = True
        self._in_flight += 1
        return None

    async def _check_limits(self, admitted: Admitted) -> Rejection | None:
        """The rate limits, then the budgets, of an admitted call."""
        record = admitted.record
        limits = (record.limits if record is not None else None) or self._default_limits
        if not limits.unlimited:
            try:
                retry_after_s = await self._limiter.acquire(admitted.client, limits)
            except LimiterUnavailable as error:
                refused = self._store_failed("rate limits", self._rate_limit_failure, error)
                if refused is not None:
                    return refused
            else:
                self._store_ok()
                if retry_after_s > 0:
                    self._rate_rejections.inc()
                    return Rejection("rate_limit", "rate limit of this API key exceeded "
                                     f"(retry in {retry_after_s:.3f} s)", retry_after_s)
        budgets = (record.budgets if record is not None else None) or self._default_budgets
        if self._budgets is None or budgets.unlimited:
            return None
        try:
            used_up = await self._budgets.check(admitted.client, budgets)
        except BudgetUnavailable as error:
            return self._store_failed("budgets", self._budget_failure, error)
        self._store_ok()
        admitted.budgets = budgets
        if not used_up:
            return None
        self._budget_rejections.inc()
        window = self._budgets.window_s
        return Rejection(
            "budget", "budget of this API key used up: " + "; ".join(
                f"{e.budget} {e.used:g} of {e.limit:g} per {window:g} s" for e in used_up),
            max(e.retry_after_s for e in used_up), metadata=(("window_s", f"{window:g}"),),
            violations=tuple((f"key:{admitted.client}", f"{e.budget}: {e.used:g} used of "
                              f"{e.limit:g} per {window:g} s") for e in used_up))

    async def charge(self, admitted: Admitted, response: object) -> Usage:
        """Charges `admitted`'s budgets with what `response` says the call used
        (`budgets.usage_of`), and returns that. Redis unreachable: logged, not charged."""
        usage = usage_of(response) if admitted.budgets is not None else Usage()
        if not usage or self._budgets is None:
            return usage
        try:
            await self._budgets.charge(admitted.client, usage)
        except BudgetUnavailable as error:
            self._store_failed("budgets (charge lost)", "fail_open", error)
        else:
            self._store_ok()
        return usage

    def leave(self, admitted: Admitted) -> None:
        """One admitted call ended (a second call for the same call does nothing)."""
        if admitted.released:
            return
        admitted.released = True
        self._in_flight -= 1
        if admitted.counted_per_key:
            left = self._per_key[admitted.client] - 1
            if left:
                self._per_key[admitted.client] = left
            else:
                del self._per_key[admitted.client]

    async def admit(self, credential: Credential) -> Rejection | None:
        """`enter` for no method in particular (every scope): None when the call may run (the
        caller then owes one `release()`, which ends the oldest call admitted so), else why
        not. For benchmarks and tests of the decision alone."""
        admitted = await self.enter(credential)
        if isinstance(admitted, Rejection):
            return admitted
        self._legacy.append(admitted)
        return None

    def release(self) -> None:
        """The oldest call that `admit` let in ended."""
        self.leave(self._legacy.pop(0))

    def _store_ok(self) -> None:
        if self._redis_state is not None:
            self._redis_state.ok()

    def _store_failed(self, what: str, policy: FailurePolicy,
                      error: Exception) -> Rejection | None:
        """Redis failed for `what`: records it and, failing closed, the call's refusal."""
        if self._redis_state is not None:
            self._redis_state.failed(str(error))
        if policy == "fail_closed":
            return Rejection("store_unavailable", f"the store of the {what} (Redis) cannot be "
                             "reached; retry shortly", ADMISSION_RETRY_AFTER_S,
                             metadata=(("limit", what),))
        now = time.monotonic()
        if now - self._last_limiter_warning >= _WARN_EVERY_S:
            self._last_limiter_warning = now
            log.warning("access: %s not enforced: %s", what, error)
        return None

    async def _reload_forever(self) -> None:
        while True:
            await asyncio.sleep(self._reload_s)
            if self._ping is not None:
                await self._ping_redis()
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

    async def _ping_redis(self) -> None:
        try:
            await self._ping()
        except Exception as error:  # noqa: BLE001 - any failure means unreachable here
            if self._redis_state is not None:
                self._redis_state.failed(error)
        else:
            self._store_ok()
