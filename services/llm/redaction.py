"""Keeps the gateway's credentials out of its logs and error messages.

A provider's error body may echo the API key it was sent (some do, in full or in part), and a base
URL may carry credentials (`https://user:pass@host/v1`). Two layers, both from `libs.redaction`:
- `scrub`: every provider error message is redacted (the configured keys, URL user information,
  common key shapes) and cut to `MAX_ERROR_CHARS` when the error is made, so `Attempt.error`, the
  gateway's warnings and anything else built from it never hold them;
- `install_log_redaction`: a filter on the process's log handlers redacts every record (the HTTP
  client's own request lines, a traceback) with the same secrets before it is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from libs.redaction import redact
from services.llm.settings import LlmSettings

MAX_ERROR_CHARS = 500
"""Longest provider error message kept (a provider's HTML error page is not a log line)."""


def scrub(message: str, secrets: Iterable[str] = ()) -> str:
    """`message` with `secrets` and credentials redacted (`libs.redaction.redact`), at most
    `MAX_ERROR_CHARS` characters."""
    message = redact(message, secrets)
    return message if len(message) <= MAX_ERROR_CHARS else message[:MAX_ERROR_CHARS] + "..."


def url_secrets(url: str | None) -> list[str]:
    """The user name and password a URL carries (empty when none)."""
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    return [part for part in (parts.username, parts.password) if part]


def gateway_secrets(settings: LlmSettings) -> tuple[str, ...]:
    """Every credential of the gateway's settings: the providers' API keys and the user
    information of their base URLs."""
    keys = [key.get_secret_value() for key in (settings.openai_api_key,
                                               settings.anthropic_api_key,
                                               settings.local_api_key) if key is not None]
    for url in (settings.openai_base_url, settings.anthropic_base_url, settings.local_base_url):
        keys.extend(url_secrets(url))
    return tuple(keys)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (arguments merged, traceback folded in) with `secrets` and
    credentials redacted; never drops a record."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self._secrets = tuple(secrets)
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self._formatter.formatException(record.exc_info)}"
            record.exc_info = None
            record.exc_text = None
        record.msg = redact(message, self._secrets)
        record.args = None
        return True


def install_log_redaction(settings: LlmSettings) -> RedactingFilter:
    """Adds a `RedactingFilter` with the gateway's secrets to every handler of the root logger
    (set up by `libs.logs.setup_logging`); returns it."""
    redacting = RedactingFilter(gateway_secrets(settings))
    for handler in logging.getLogger().handlers:
        handler.addFilter(redacting)
    return redacting
