"""API keys: made once, kept only as SHA-256 hashes, looked up in constant time.

A key is `mmk_` followed by `secrets.token_urlsafe(32)` (256 random bits as 43 URL-safe base64
characters): the prefix lets secret scanners and people recognise one. Only its SHA-256 digest is
stored, beside the key's name, creation time and what the key may do: its scopes (`solve`, `query`,
`ingest`, `admin`; a record without scopes, as written before scopes existed, has them all), the
collections it may name (none listed: any), and its own rate limits, cap on calls in flight and
budgets (each unset: the orchestrator's defaults).

Two stores hold the records:
- `FileKeyStore`: a JSON file (written atomically, mode 0600, under an exclusive lock), e.g. a
  Kubernetes Secret mounted as a file. The orchestrator re-reads it when its mtime, size or inode
  changes, so a revocation takes effect without a restart.
- `RedisKeyStore`: a Redis hash (`mcts-mesh:api-keys`, one field per key name), shared by every
  replica.

Neither a key nor its hash is ever logged or put in an error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from libs.errors import InvalidArgument, NotFound
from services.orchestrator.access.scopes import ADMIN, SCOPES, allows

KEY_PREFIX = "mmk_"
MAX_KEY_LENGTH = 256
"""Presented keys longer than this are rejected without hashing (a real key has 47 characters)."""
REDIS_KEYS_HASH = "mcts-mesh:api-keys"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z")
_COLLECTION = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_FILE_VERSION = 1


@dataclass(frozen=True)
class RateLimits:
    """Requests allowed per second, minute and hour; 0 leaves that window unlimited."""

    per_second: int = 0
    per_minute: int = 0
    per_hour: int = 0

    def windows(self) -> tuple[tuple[int, int], ...]:
        """(limit, window in ms) for each of the three windows, second first."""
        return ((self.per_second, 1_000), (self.per_minute, 60_000), (self.per_hour, 3_600_000))

    @property
    def unlimited(self) -> bool:
        return not (self.per_second or self.per_minute or self.per_hour)

    def check(self) -> RateLimits:
        """Returns self. Raises InvalidArgument naming a negative limit."""
        for field, value in asdict(self).items():
            if not isinstance(value, int) or value < 0:
                raise InvalidArgument(field, f"must be an integer >= 0, got {value!r}")
        return self


@dataclass(frozen=True)
class Budgets:
    """What a key may use per budget window (`ORCHESTRATOR_BUDGET_WINDOW_S`): LLM tokens
    (prompt and completion), US dollars of provider cost, MCTS simulations; 0 leaves that budget
    unlimited."""

    tokens: int = 0
    usd: float = 0.0
    simulations: int = 0

    @property
    def unlimited(self) -> bool:
        return not (self.tokens or self.usd or self.simulations)

    def check(self) -> Budgets:
        """Returns self. Raises InvalidArgument naming a negative or non-numeric budget."""
        for field, value in asdict(self).items():
            kind = (int, float) if field == "usd" else int
            if isinstance(value, bool) or not isinstance(value, kind) or not value >= 0 \
                    or value == float("inf"):
                raise InvalidArgument(f"budgets.{field}",
                                      f"must be a finite number >= 0, got {value!r}")
        return self


@dataclass(frozen=True)
class KeyRecord:
    """One stored key: its name, the hex SHA-256 of the key, when it was made (RFC 3339, UTC), and
    what it may do. Each of the rest unset (None) takes the default:
    - `limits`: own rate limits (default: the orchestrator's);
    - `scopes`: what it may call (`scopes.SCOPES`; default: all, as for records written before
      scopes existed);
    - `collections`: the only collections it may name (default: any);
    - `max_in_flight`: own cap on its calls running at once, 0 none (default: the
      orchestrator's `max_in_flight_per_key`);
    - `budgets`: own budgets per window (default: the orchestrator's `budget_*`)."""

    name: str
    sha256: str
    created: str
    limits: RateLimits | None = None
    scopes: frozenset[str] | None = None
    collections: frozenset[str] | None = None
    max_in_flight: int | None = None
    budgets: Budgets | None = None

    def to_json(self) -> dict:
        out: dict = {"name": self.name, "sha256": self.sha256, "created": self.created}
        if self.limits is not None:
            out["limits"] = asdict(self.limits)
        if self.scopes is not None:
            out["scopes"] = sorted(self.scopes)
        if self.collections is not None:
            out["collections"] = sorted(self.collections)
        if self.max_in_flight is not None:
            out["max_in_flight"] = self.max_in_flight
        if self.budgets is not None:
            out["budgets"] = asdict(self.budgets)
        return out

    @classmethod
    def from_json(cls, data: dict) -> KeyRecord:
        """Raises ValueError (KeyError, TypeError, InvalidArgument) on a malformed record."""
        digest = str(data["sha256"])
        if len(bytes.fromhex(digest)) != 32:
            raise ValueError("sha256 must be 64 hex digits")
        limits, budgets = data.get("limits"), data.get("budgets")
        scopes, collections = data.get("scopes"), data.get("collections")
        return cls(name=check_name(str(data["name"])), sha256=digest, created=str(data["created"]),
                   limits=RateLimits(**limits).check() if limits is not None else None,
                   scopes=check_scopes(scopes) if scopes is not None else None,
                   collections=(check_collections(collections) if collections is not None
                                else None),
                   max_in_flight=(check_max_in_flight(data["max_in_flight"])
                                  if data.get("max_in_flight") is not None else None),
                   budgets=Budgets(**budgets).check() if budgets is not None else None)


def check_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """The scopes as a set. Raises InvalidArgument("scopes") on one that is not in SCOPES, or on
    a string or an empty list."""
    if isinstance(scopes, str) or not scopes:
        raise InvalidArgument("scopes", f"must be a non-empty list of {', '.join(SCOPES)}")
    unknown = sorted(str(scope) for scope in scopes if scope not in SCOPES)
    if unknown:
        raise InvalidArgument("scopes", f"unknown scope {unknown[0]!r}; the scopes are "
                                        f"{', '.join(SCOPES)}")
    return frozenset(scopes)


def check_collections(collections: Iterable[str]) -> frozenset[str]:
    """The collection names as a set. Raises InvalidArgument("collections") on a name that does
    not match ^[a-zA-Z0-9_-]{1,64}$, or on a string or an empty list."""
    if isinstance(collections, str) or not collections:
        raise InvalidArgument("collections", "must be a non-empty list of collection names")
    for collection in collections:
        if not isinstance(collection, str) or not _COLLECTION.fullmatch(collection):
            raise InvalidArgument("collections", f"{collection!r} must match "
                                                 "^[a-zA-Z0-9_-]{1,64}$")
    return frozenset(collections)


def check_max_in_flight(value: int) -> int:
    """Returns `value`. Raises InvalidArgument("max_in_flight") unless it is an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument("max_in_flight", f"must be an integer >= 0, got {value!r}")
    return value


def check_name(name: str) -> str:
    """Returns `name`. Raises InvalidArgument unless it is 1-64 of a-z 0-9 _ . - (first a-z0-9)."""
    if not _NAME.match(name):
        raise InvalidArgument("name", "a key name is 1-64 characters of a-z, 0-9, '_', '.', '-', "
                              "starting with a letter or digit")
    return name


def generate_key() -> str:
    """A new key: `mmk_` + 43 URL-safe base64 characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_digest(key: str) -> bytes:
    """SHA-256 of the key's ASCII bytes (32 bytes)."""
    return hashlib.sha256(key.encode("ascii")).digest()


@dataclass(frozen=True)
class Grants:
    """What a new key may do besides its rate limits (see KeyRecord; None: the default)."""

    scopes: Iterable[str] | None = None
    collections: Iterable[str] | None = None
    max_in_flight: int | None = None
    budgets: Budgets | None = None


def new_record(name: str, limits: RateLimits | None,
               grants: Grants | None = None) -> tuple[str, KeyRecord]:
    """A new key and the record to store for it.

    Raises:
        InvalidArgument: a bad name, limit, scope, collection, cap or budget."""
    grants = grants or Grants()
    record = KeyRecord(
        check_name(name), "", "", limits.check() if limits is not None else None,
        scopes=check_scopes(grants.scopes) if grants.scopes is not None else None,
        collections=(check_collections(grants.collections) if grants.collections is not None
                     else None),
        max_in_flight=(check_max_in_flight(grants.max_in_flight)
                       if grants.max_in_flight is not None else None),
        budgets=grants.budgets.check() if grants.budgets is not None else None)
    key = generate_key()
    created = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return key, replace(record, sha256=key_digest(key).hex(), created=created)


@dataclass(frozen=True)
class Caller:
    """Whose call it is, for resources owned by a key: `owner` the key's name ("" without a
    key), `record` its key record (None without a key)."""

    owner: str
    record: KeyRecord | None = None

    @property
    def admin(self) -> bool:
        """May see every key's resources: the key holds `admin` (calls without a key, when keys
        are optional, hold every scope)."""
        return self.record is None or allows(self.record.scopes, ADMIN)

    def may(self, scope: str) -> bool:
        """The key holds `scope` (or `admin`)."""
        return self.record is None or allows(self.record.scopes, scope)


class KeyIndex:
    """The stored keys by digest, for the request path.

    `find(key)` hashes the presented key and looks its digest up; the final equality test is
    `hmac.compare_digest`. Only digests are compared, so no timing reveals anything about a stored
    key (finding a key whose SHA-256 shares a prefix with a stored digest is a preimage problem).
    """

    def __init__(self, records: Iterable[KeyRecord] = ()) -> None:
        self._by_digest = {bytes.fromhex(record.sha256): (bytes.fromhex(record.sha256), record)
                           for record in records}
        self._by_name = {record.name: record for _, record in self._by_digest.values()}

    def named(self, name: str) -> KeyRecord | None:
        """The record of the key named `name`, or None (a durable run's worker acts for the key
        that created the run, by its name)."""
        return self._by_name.get(name)

    def __len__(self) -> int:
        return len(self._by_digest)

    def find(self, key: str) -> KeyRecord | None:
        """The record of `key` (printable ASCII, checked by the caller), or None."""
        digest = key_digest(key)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        return found[1]


class FileKeyStore:
    """Keys in a JSON file: `{"version": 1, "keys": [record, ...]}`; a missing file has no keys."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None

    def describe(self) -> str:
        return f"file {self.path}"

    async def read(self) -> list[KeyRecord]:
        """Every record. Raises ValueError naming the file when it is not a key file."""
        return self._read()

    async def read_if_changed(self) -> list[KeyRecord] | None:
        """The records if the file changed (mtime, size or inode) since the last read, else None.
        One `stat` per call."""
        signature = self._signature()
        if signature == self._seen:
            return None
        records = self._read()
        self._seen = signature
        return records

    async def create(self, name: str, limits: RateLimits | None = None,
                     grants: Grants | None = None) -> str:
        """Stores a new key named `name` and returns the key (shown once, never stored).
        `grants`: its scopes, collections, cap in flight and budgets (None: the defaults).

        Raises:
            InvalidArgument: a bad name, limit or grant, or a key with that name exists.
        """
        with self._locked():
            records = self._read()
            if any(record.name == name for record in records):
                raise InvalidArgument("name", f"a key named {name!r} exists; revoke it first")
            key, record = new_record(name, limits, grants)
            self._write([*records, record])
        return key

    async def revoke(self, name: str) -> None:
        """Deletes the key named `name`. Raises NotFound when there is none."""
        with self._locked():
            records = self._read()
            kept = [record for record in records if record.name != name]
            if len(kept) == len(records):
                raise NotFound(f"no key named {name!r} in {self.path}")
            self._write(kept)

    async def aclose(self) -> None:
        return None

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def _read(self) -> list[KeyRecord]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            data = json.loads(text)
            if data.get("version") != _FILE_VERSION:
                raise ValueError(f"version must be {_FILE_VERSION}")
            return [KeyRecord.from_json(item) for item in data["keys"]]
        except (ValueError, KeyError, TypeError, AttributeError, InvalidArgument) as error:
            raise ValueError(f"{self.path} is not an API key file: {type(error).__name__}") \
                from None

    def _write(self, records: list[KeyRecord]) -> None:
        text = json.dumps({"version": _FILE_VERSION,
                           "keys": [record.to_json() for record in records]}, indent=2)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock beside the file, so that two `keys` commands never lose an update."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT,
                       0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)


class RedisKeyStore:
    """Keys in the Redis hash `mcts-mesh:api-keys` (field: the key's name; value: its record as
    JSON), shared by every orchestrator replica that has the same `ORCHESTRATOR_REDIS_URL`."""

    def __init__(self, client) -> None:
        """`client`: a `redis.asyncio.Redis` (the caller owns it)."""
        self._redis = client

    def describe(self) -> str:
        return f"Redis hash {REDIS_KEYS_HASH}"

    async def read(self) -> list[KeyRecord]:
        """Every record. Raises ValueError on a malformed one; redis errors pass through."""
        raw = await self._redis.hgetall(REDIS_KEYS_HASH)
        try:
            return [KeyRecord.from_json(json.loads(value)) for value in raw.values()]
        except (ValueError, KeyError, TypeError, AttributeError, InvalidArgument) as error:
            raise ValueError(f"{REDIS_KEYS_HASH} holds a malformed key record: "
                             f"{type(error).__name__}") from None

    async def read_if_changed(self) -> list[KeyRecord]:
        """Every record (one HGETALL; the caller rebuilds its index each time)."""
        return await self.read()

    async def create(self, name: str, limits: RateLimits | None = None,
                     grants: Grants | None = None) -> str:
        """As FileKeyStore.create (HSETNX, so two creators never overwrite each other)."""
        key, record = new_record(name, limits, grants)
        if not await self._redis.hsetnx(REDIS_KEYS_HASH, name, json.dumps(record.to_json())):
            raise InvalidArgument("name", f"a key named {name!r} exists; revoke it first")
        return key

    async def revoke(self, name: str) -> None:
        """As FileKeyStore.revoke."""
        if not await self._redis.hdel(REDIS_KEYS_HASH, name):
            raise NotFound(f"no key named {name!r} in {REDIS_KEYS_HASH}")

    async def aclose(self) -> None:
        return None
