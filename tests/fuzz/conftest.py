"""Prints how many fuzz cases the run tried, by kind, at the end of the pytest summary."""

from __future__ import annotations

import sys


def pytest_terminal_summary(terminalreporter) -> None:
    module = sys.modules.get("test_fuzz_mesh")
    cases = getattr(module, "CASES", None)
    if cases:
        parts = ", ".join(f"{kind} {count}" for kind, count in sorted(cases.items()))
        terminalreporter.write_line(f"fuzz cases tried: {sum(cases.values())} ({parts})")
