"""Access control's core without gRPC: credentials from metadata, the key index and file store,
the in-memory rate limiter (on a fake clock), admission control."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from libs.errors import InvalidArgument, NotFound
from services.orchestrator.access.control import (
    ANONYMOUS,
    INVALID_KEY,
    MALFORMED,
    MISSING_KEY,
    NO_CREDENTIAL,
    AccessControl,
    Credential,
    credential_from_metadata,
)
from services.orchestrator.access.keys import (
    KEY_PREFIX,
    FileKeyStore,
    KeyIndex,
    KeyRecord,
    RateLimits,
    key_digest,
)
from services.orchestrator.access.limits import LimiterUnavailable, MemoryRateLimiter
from services.orchestrator.metrics import RATE_LIMIT_REJECTIONS


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_credentials_from_metadata():
    assert credential_from_metadata([]) == NO_CREDENTIAL
    assert credential_from_metadata([("x-api-key", "mmk_abc")]) == Credential("mmk_abc")
    assert credential_from_metadata([("authorization", "Bearer mmk_abc")]) == Credential("mmk_abc")
    assert credential_from_metadata([("authorization", "bearer  mmk_abc ")]) == \
        Credential("mmk_abc")
    # x-api-key wins over Authorization
    assert credential_from_metadata([("authorization", "Bearer b"), ("x-api-key", "a")]) == \
        Credential("a")
    for bad in ([("x-api-key", "")], [("x-api-key", "k" * 257)], [("x-api-key", "clé")],
                [("x-api-key", "a b")], [("x-api-key", "a\tb")], [("authorization", "Basic xyz")],
                [("authorization", "Bearer")], [("x-api-key-bin", b"\xc3\xa9")],
                [("authorization-bin", b"x")], [("x-api-key", b"bytes")]):
        assert credential_from_metadata(bad) == MALFORMED, bad


def test_key_index_finds_only_stored_digests():
    records_key = "mmk_" + "a" * 43
    index = KeyIndex([KeyRecord("alice", key_digest(records_key).hex(), "2026-11-24T00:00:00Z")])
    assert index.find(records_key).name == "alice"
    assert index.find(records_key[:-1]) is None
    assert index.find(records_key + "a") is None


async def test_file_store_create_list_revoke(tmp_path):
    path = tmp_path / "keys" / "api-keys.json"
    store = FileKeyStore(path)
    assert await store.read() == []
    key = await store.create("alice")
    assert key.startswith(KEY_PREFIX) and len(key) == len(KEY_PREFIX) + 43
    other = await store.create("bob", RateLimits(per_second=5))
    text = path.read_text()
    assert key not in text and other not in text  # only hashes are stored
    assert key_digest(key).hex() in text
    assert os.stat(path).st_mode & 0o777 == 0o600
    records = {record.name: record for record in await store.read()}
    assert records["alice"].limits is None
    assert records["bob"].limits == RateLimits(per_second=5)
    assert KeyIndex(records.values()).find(key).name == "alice"
    with pytest.raises(InvalidArgument) as exists:
        await store.create("alice")
    assert exists.value.field == "name"
    with pytest.raises(InvalidArgument):
        await store.create("Not A Name")
    with pytest.raises(InvalidArgument):
        await store.create("carol", RateLimits(per_second=-1))
    await store.revoke("alice")
    assert [record.name for record in await store.read()] == ["bob"]
    with pytest.raises(NotFound):
        await store.revoke("alice")


async def test_file_store_reads_only_when_the_file_changes(tmp_path):
    path = tmp_path / "api-keys.json"
    store, writer = FileKeyStore(path), FileKeyStore(path)
    assert await store.read_if_changed() is None  # no file: no keys, nothing new
    await writer.create("alice")
    assert [r.name for r in await store.read_if_changed()] == ["alice"]
    assert await store.read_if_changed() is None
    await writer.create("bob")
    assert sorted(r.name for r in await store.read_if_changed()) == ["alice", "bob"]


async def test_file_store_refuses_a_file_that_is_no_key_file(tmp_path):
    path = tmp_path / "api-keys.json"
    path.write_text(json.dumps({"version": 1, "keys": [{"name": "a", "sha256": "zz",
                                                          "created": "x"}]}))
    with pytest.raises(ValueError, match="is not an API key file"):
        await FileKeyStore(path).read()


async def test_memory_limiter_counts_exactly_per_window():
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock)
    limits = RateLimits(per_second=50, per_minute=120)
    results = [await limiter.acquire("alice", limits) for _ in range(200)]
    assert sum(1 for r in results if r == 0.0) == 50
    assert all(r == pytest.approx(1.0) for r in results[50:])
    clock.now += 0.4  # the window opened at the first request: 0.6 s left
    assert await limiter.acquire("alice", limits) == pytest.approx(0.6)
    assert await limiter.acquire("bob", limits) == 0.0  # another client has its own windows
    clock.now += 0.6
    assert await limiter.acquire("alice", limits) == 0.0
    for _ in range(49):
        await limiter.acquire("alice", limits)
    clock.now += 1.0
    # 100 counted this minute; refusals by the second window did not count in the minute
    passed = sum([await limiter.acquire("alice", limits) == 0.0 for _ in range(50)])
    assert passed == 20
    assert await limiter.acquire("alice", limits) == pytest.approx(60.0 - 2.0)


class _DownLimiter:
    def describe(self) -> str:
        return "down"

    async def acquire(self, client, limits):
        raise LimiterUnavailable("Redis: ConnectionError")


async def _control(tmp_path, **overrides) -> tuple[AccessControl, str]:
    store = FileKeyStore(tmp_path / "api-keys.json")
    key = await store.create("alice")
    options = dict(require_key=True, store=store, limiter=MemoryRateLimiter(),
                   default_limits=RateLimits(), max_in_flight=2, reload_s=60.0)
    options.update(overrides)
    control = AccessControl(**options)
    await control.start()
    return control, key


async def test_control_checks_keys(tmp_path):
    control, key = await _control(tmp_path)
    try:
        assert await control.admit(NO_CREDENTIAL) is MISSING_KEY
        assert await control.admit(MALFORMED) is INVALID_KEY
        assert await control.admit(Credential("mmk_" + "x" * 43)) is INVALID_KEY
        assert await control.admit(Credential(key)) is None
        control.release()
        assert control.in_flight == 0
    finally:
        await control.aclose()


async def test_control_admits_anonymous_calls_when_keys_are_optional(tmp_path):
    clock = FakeClock()
    control, _ = await _control(tmp_path, require_key=False,
                                limiter=MemoryRateLimiter(clock),
                                default_limits=RateLimits(per_second=1))
    try:
        assert await control.admit(NO_CREDENTIAL) is None
        control.release()
        refused = await control.admit(NO_CREDENTIAL)  # one budget shared by keyless calls
        assert refused.reason == "rate_limit" and refused.retry_after_s == pytest.approx(1.0)
        assert await control.admit(MALFORMED) is INVALID_KEY  # a key that is sent is checked
    finally:
        await control.aclose()
    assert ANONYMOUS.startswith("*")


async def test_admission_refuses_beyond_max_in_flight(tmp_path):
    control, key = await _control(tmp_path)
    before = RATE_LIMIT_REJECTIONS.labels("admission")._value.get()
    try:
        assert await control.admit(Credential(key)) is None
        assert await control.admit(Credential(key)) is None
        refused = await control.admit(Credential(key))
        assert refused.reason == "admission" and refused.retry_after_s > 0
        assert control.in_flight == 2
        control.release()
        assert await control.admit(Credential(key)) is None
    finally:
        await control.aclose()
    assert RATE_LIMIT_REJECTIONS.labels("admission")._value.get() == before + 1


async def test_rate_limit_refusal_frees_its_admission_slot(tmp_path):
    control, key = await _control(tmp_path, default_limits=RateLimits(per_second=1))
    try:
        assert await control.admit(Credential(key)) is None
        assert (await control.admit(Credential(key))).reason == "rate_limit"
        assert control.in_flight == 1
    finally:
        await control.aclose()


async def test_a_limiter_that_is_down_does_not_take_the_api_down(tmp_path, caplog):
    control, key = await _control(tmp_path, limiter=_DownLimiter(),
                                  default_limits=RateLimits(per_second=1))
    try:
        for _ in range(2):
            assert await control.admit(Credential(key)) is None
            control.release()
    finally:
        await control.aclose()
    warnings = [r for r in caplog.records if "rate limits not enforced" in r.getMessage()]
    assert len(warnings) == 1  # once a minute, not once a call


async def test_revocation_takes_effect_at_the_next_reload(tmp_path):
    control, key = await _control(tmp_path, reload_s=0.05)
    try:
        assert await control.admit(Credential(key)) is None
        control.release()
        await FileKeyStore(tmp_path / "api-keys.json").revoke("alice")
        for _ in range(100):
            if await control.admit(Credential(key)) is INVALID_KEY:
                break
            control.release()
            await asyncio.sleep(0.02)
        assert await control.admit(Credential(key)) is INVALID_KEY
    finally:
        await control.aclose()
