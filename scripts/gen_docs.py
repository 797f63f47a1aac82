"""Writes the documentation site's generated pages from the code; `--check` only compares.

Pages (paths under docs/):
- reference/grpc.md: every service, method, message and enum of `protos/mesh`, with the protos'
  comments, from a descriptor set that `buf build` writes with source info;
- reference/rest.md: every path of the orchestrator's REST front, from the OpenAPI document it
  serves (built here by the front itself, without a network), with the document in the page;
- reference/settings.md: every setting of every service, from its pydantic-settings class (variable,
  type, default, and the attribute's docstring or the field's description);
- reference/cli.md: every `mcts-mesh` command's help, from its argparse parser;
- reference/metrics.md: every Prometheus metric, from its declaration;
- index.md and changelog.md: README.md and CHANGELOG.md with their links made relative to docs/.

Output is deterministic: the environment variables that settings and the CLI read are removed
first, help is formatted at 100 columns, and everything is sorted or in declaration order.

Usage: .venv/bin/python scripts/gen_docs.py [--check]   (`make docs-gen`; --check exits 1 and
names each page that differs from a fresh generation)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path[:0] = [str(ROOT), str(ROOT / "libs" / "stubs")]

_READ_ENV = ("MCTS_", "NEURAL_", "RETRIEVAL_", "LLM_", "ORCHESTRATOR_", "OTEL_", "MCTS_MESH_")


def _clean_environment() -> None:
    """Removes the variables the settings classes and the CLI's defaults read, so the pages show
    the code's defaults, not this machine's."""
    for name in list(os.environ):
        if name.startswith(_READ_ENV):
            del os.environ[name]
    os.environ["COLUMNS"] = "100"


def generate() -> dict[str, str]:
    """Every generated page: {path under docs/: text}."""
    from scripts.docs_gen import cli, grpc_api, metrics, rest_api, settings, site

    pages = {
        "reference/grpc.md": grpc_api.page(ROOT),
        "reference/rest.md": rest_api.page(),
        "reference/settings.md": settings.page(),
        "reference/cli.md": cli.page(),
        "reference/metrics.md": metrics.page(ROOT),
    }
    pages.update(site.pages(ROOT))
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="compare with the checked-in pages instead of writing them")
    args = parser.parse_args(argv)
    _clean_environment()
    pages = generate()
    stale = []
    for relative, text in sorted(pages.items()):
        path = DOCS / relative
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        names = ", ".join(f"docs/{page}" for page in stale)
        print(f"gen_docs: out of date (run `make docs-gen`): {names}")
        return 1
    if not args.check:
        print(f"gen_docs: {len(pages)} pages, {len(stale)} rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
