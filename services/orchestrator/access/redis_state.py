"""What access control last saw of Redis, for `/ready` and the log.

Every rate-limit, budget and key-store operation reports its outcome (`ok()`, `failed(error)`), and
access control PINGs Redis once per key-reload period, so the state is at most that old even when
no call touches Redis. `/ready` lists it beside the mesh's services (`as_json`), with what the
orchestrator does while Redis is unreachable (`fail_open` or `fail_closed`, per kind of limit).
"""

from __future__ import annotations

import logging
import time

from services.orchestrator.dependencies import NOT_SERVING, SERVING, UNKNOWN

log = logging.getLogger(__name__)


class RedisState:
    """The last outcome of talking to Redis.

    Args:
        rate_limit_failure: "fail_open" or "fail_closed" (rate limits while Redis is unreachable).
        budget_failure: the same for budgets.
    """

    def __init__(self, rate_limit_failure: str, budget_failure: str) -> None:
        self._policy = f"rate limits {rate_limit_failure}, budgets {budget_failure}"
        self.state = UNKNOWN
        self.detail = "not checked yet"
        self._since = time.monotonic()

    @property
    def reachable(self) -> bool:
        return self.state == SERVING

    def ok(self) -> None:
        """An operation succeeded."""
        if self.state != SERVING:
            if self.state == NOT_SERVING:
                log.info("access: Redis reachable again")
            self._set(SERVING, "answered")

    def failed(self, error: BaseException | str) -> None:
        """An operation failed: Redis is unreachable (or refused it)."""
        detail = f"unreachable ({error})" if isinstance(error, str) else \
            f"unreachable ({type(error).__name__})"
        if self.state != NOT_SERVING:
            log.warning("access: Redis %s; %s", detail, self._policy)
        self._set(NOT_SERVING, detail)

    def as_json(self) -> dict[str, object]:
        """The entry `/ready` lists: name "redis", service "redis", state (SERVING, NOT_SERVING,
        UNKNOWN), detail (with the fail_open / fail_closed policy) and seconds in that state."""
        return {"name": "redis", "service": "redis", "state": self.state,
                "detail": f"{self.detail}; {self._policy} while unreachable",
                "for_s": round(time.monotonic() - self._since, 1)}

    def _set(self, state: str, detail: str) -> None:
        if state != self.state:
            self._since = time.monotonic()
        self.state, self.detail = state, detail
