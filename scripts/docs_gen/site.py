"""docs/index.md and docs/changelog.md: README.md and CHANGELOG.md with their links made relative
to docs/ (the site's home page is the README)."""

from __future__ import annotations

import re
from pathlib import Path

from scripts.docs_gen.md import GENERATED

_LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _relink(text: str) -> str:
    """Links of a root file rewritten for a page in docs/: `docs/x.md` -> `x.md`, CHANGELOG.md ->
    changelog.md; other repository paths become code, since the site does not hold them."""
    def replace(match: re.Match[str]) -> str:
        target, fragment = match.group(1), match.group(2) or ""
        if target.startswith(("http://", "https://", "mailto:")):
            return match.group(0)
        if target.startswith("docs/"):
            return f"]({target[len('docs/'):]}{fragment})"
        if target == "CHANGELOG.md":
            return f"](changelog.md{fragment})"
        return f"]({target}{fragment})"
    return _LINK.sub(replace, text)


def pages(root: Path) -> dict[str, str]:
    """{"index.md": ..., "changelog.md": ...}."""
    out = {}
    for source, page in (("README.md", "index.md"), ("CHANGELOG.md", "changelog.md")):
        text = (root / source).read_text(encoding="utf-8")
        out[page] = GENERATED.format(source=source) + "\n\n" + _relink(text)
    return out
