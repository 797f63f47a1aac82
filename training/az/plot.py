"""The learning curve of a connect4-az run, drawn from a checkpoint's history (config.json):
arena score by generation (with the gating threshold) and the Pons rates (network alone, PUCT),
with matplotlib; and the same figures as a text table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from services.neural.checkpoint import CONFIG_FILE, CheckpointError


def read_history(checkpoint: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(history, settings) of a connect4-az checkpoint folder.

    Raises:
        CheckpointError: config.json missing, unreadable or without a history (names the file).
    """
    path = checkpoint / CONFIG_FILE
    try:
        metadata = json.loads(path.read_text())["metadata"]
        history = metadata["history"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: no connect4-az history ({error!r})") from error
    if not isinstance(history, list) or not history:
        raise CheckpointError(f"{path}: empty history")
    return history, metadata.get("settings", {})


def table(history: list[dict[str, Any]]) -> str:
    """One line per generation: arena score, promotion, losses, Pons rates, positions, CPU-s."""
    files = sorted({name for entry in history for name in entry.get("pons", {})})
    header = ["gen", "arena", "best", "loss", "positions"] + [
        f"{name} net/puct" for name in files] + ["cpu_s"]
    rows = [header]
    for entry in history:
        arena = entry.get("arena")
        rows.append([
            str(entry["generation"]),
            f"{arena['score']:.3f}{'*' if entry.get('promoted') else ''}" if arena else "-",
            str(entry.get("best_generation", "")),
            f"{entry['losses']['total']:.3f}" if "losses" in entry else "-",
            str(entry.get("positions", "-")),
            *[(f"{entry['pons'][name]['network']:.3f}/{entry['pons'][name]['puct']:.3f}"
               if name in entry.get("pons", {}) else "-") for name in files],
            f"{sum(entry.get('cpu_s', {}).values()):.0f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
                     for row in rows)


def plot_history(checkpoint: Path, output: Path) -> str:
    """Writes the learning-curve figure to `output` (PNG, SVG or PDF by its suffix); returns
    the text table (`table`)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.ticker import MaxNLocator

    history, settings = read_history(checkpoint)
    figure, (top, bottom) = pyplot.subplots(2, 1, figsize=(8, 7), sharex=True)
    played = [entry for entry in history if "arena" in entry]
    top.plot([e["generation"] for e in played], [e["arena"]["score"] for e in played], "o-",
             label="candidate's arena score")
    for entry in played:
        if entry.get("promoted"):
            top.plot(entry["generation"], entry["arena"]["score"], "g*", markersize=12)
    top.axhline(settings.get("arena_threshold", 0.55), color="grey", linestyle="--",
                label="gating threshold")
    top.set_ylabel("score against the best")
    top.legend(loc="lower right")
    files = sorted({name for entry in history for name in entry.get("pons", {})})
    for name in files:
        rows = [e for e in history if name in e.get("pons", {})]
        x = [e["generation"] for e in rows]
        bottom.plot(x, [e["pons"][name]["network"] for e in rows], "o--",
                    label=f"{name}, network alone")
        bottom.plot(x, [e["pons"][name]["puct"] for e in rows], "o-",
                    label=f"{name}, PUCT {rows[0]['pons'][name]['simulations']} sims")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("generation")
    bottom.set_ylabel("moves keeping the outcome")
    bottom.legend(loc="lower right", fontsize="small")
    figure.suptitle(f"connect4-az learning curve ({checkpoint})")
    figure.tight_layout()
    figure.savefig(output)
    pyplot.close(figure)
    return table(history)
