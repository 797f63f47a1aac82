"""Redaction of credentials from text that goes to logs or error messages: the user information of
URLs (`https://user:pass@host` -> `https://***@host`), known secrets (an API key a provider echoes
in its error body), and the shapes of common bearer credentials.

Pure functions over strings; no imports beyond `re` (settings and the search core may use them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
"""What replaces a credential."""

_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[^\s/?#@]{1,512}@")
# Shapes of credentials whatever their value: OpenAI/Anthropic keys (sk-..., sk-ant-...), bearer
# tokens in an echoed header, and "api_key": "..." style fields of a JSON or form body.
_SHAPES = (
    re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"),
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}"),
    re.compile(r"(?i)(\b(?:api[_-]?key|x-api-key|authorization|password|token)"
               r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]{4,}"),
)
MIN_SECRET_CHARS = 4
"""Shorter configured secrets are not searched for (they would mask ordinary words)."""


def redact_url_credentials(text: str) -> str:
    """`text` with the user information of every URL in it replaced by `MASK`."""
    if "@" not in text:
        return text
    return _URL_USERINFO.sub(lambda match: f"{match.group('scheme')}{MASK}@", text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every occurrence of `secrets` (each at least `MIN_SECRET_CHARS` long), URL user
    information and common credential shapes (`sk-...`, `Bearer ...`, `api_key=...`) replaced by
    `MASK`. Linear in the length of `text` per secret and pattern."""
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_CHARS},
                         key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = redact_url_credentials(text)
    for index, shape in enumerate(_SHAPES):
        text = shape.sub(MASK if index == 0 else (lambda m: m.group(1) + MASK), text)
    return text
