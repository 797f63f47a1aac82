"""docs/reference/metrics.md: every Prometheus metric, from its declaration.

The modules that declare metrics are found by their source (they import prometheus_client) under
libs/, services/ and mcts_mesh/; each is imported and its module-level metrics and collectors
listed, grouped by the service that serves them (libs/: every service)."""

from __future__ import annotations

import importlib
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from libs.services import NAMES
from scripts.docs_gen.md import GENERATED, cell, code, table

_PACKAGES = ("libs", "services", "mcts_mesh")
_SUFFIX = {"counter": "_total", "histogram": " (`_bucket`, `_sum`, `_count`)",
           "summary": " (`_sum`, `_count`)"}


def declaring_modules(root: Path) -> list[str]:
    """Dotted names of the modules whose source imports prometheus_client, sorted."""
    out = []
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "stubs" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            if "prometheus_client" in text:
                out.append(".".join(path.relative_to(root).with_suffix("").parts))
    return sorted(out)


def _families(module) -> list[tuple[str, str, str, list[str]]]:
    """(name, type, help, labels) of the metrics `module` declares at its top level."""
    out = []
    for value in vars(module).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name  # noqa: SLF001 - the declared name has no public getter
            kind = value._type  # noqa: SLF001
            shown = name + _SUFFIX.get(kind, "") if kind == "counter" else name
            out.append((shown, kind, value._documentation, list(value._labelnames)))  # noqa: SLF001
        elif (hasattr(value, "collect") and hasattr(value, "describe")
              and not isinstance(value, type)):
            for family in value.collect():
                labels = list(getattr(family, "_labelnames", ()))
                out.append((family.name, family.type, family.documentation, labels))
    return out


def _owner(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "services" and len(parts) > 1 and parts[1] in NAMES:
        return parts[1]
    return "every service"


def page(root: Path) -> str:
    """The whole page."""
    groups: dict[str, list[list[str]]] = {}
    for module in declaring_modules(root):
        for name, kind, help_text, labels in _families(importlib.import_module(module)):
            suffix = _SUFFIX.get(kind, "") if kind != "counter" else ""
            groups.setdefault(_owner(module), []).append(
                [code(name) + suffix, kind, ", ".join(code(label) for label in labels) or " ",
                 cell(help_text), code(module)])
    out = [GENERATED.format(source="the metric declarations (prometheus_client)"), "",
           "# Metrics", "",
           "Every service serves Prometheus metrics on its metrics port (`<PREFIX>METRICS_PORT`; "
           "`mcts-mesh up` uses the gRPC port + 10), and the REST front serves the "
           "orchestrator's at `/metrics`. "
           "[Operate](../guides/operate.md#metrics-traces-and-logs) says how to read them.", ""]
    for owner in ["every service", *NAMES]:
        if owner in groups:
            heading = "Every service" if owner == "every service" else owner
            out += [f"## {heading}", "",
                    table(["metric", "type", "labels", "description", "declared in"],
                          sorted(groups[owner])), ""]
    return "\n".join(out)
