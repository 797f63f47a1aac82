"""The learning curve of a connect4-az run, drawn from a checkpoint's history (config.json), with
matplotlib: per generation, the arena score (with the gating threshold), the rates of moves that
keep the game-theoretic outcome (the exact evaluation of the small boards and tic-tac-toe, and
Pons' benchmark on 7x6; network alone and PUCT), and the training losses; and the same figures as
a text table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import MaxNLocator  # noqa: E402

from services.neural.checkpoint import CONFIG_FILE, CheckpointError  # noqa: E402

TARGETS = (0.97, 0.995)
"""The exact rates a learned small-board agent aims at (network alone, PUCT at 200 simulations),
drawn as dotted lines."""


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


def _rates(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{label: rates} of one generation: "exact" and each Pons file measured."""
    found = {name: rates for name, rates in entry.get("pons", {}).items()}
    if entry.get("exact"):
        found["exact"] = entry["exact"]
    return found


def table(history: list[dict[str, Any]]) -> str:
    """One line per generation: games, positions, CPU-seconds, arena score (* promoted), loss,
    and each rate (network alone / PUCT)."""
    labels = sorted({name for entry in history for name in _rates(entry)})
    header = ["gen", "games", "positions", "cpu_s", "arena", "best", "loss"] + [
        f"{name} net/puct" for name in labels]
    rows = [header]
    for entry in history:
        arena = entry.get("arena")
        rates = _rates(entry)
        rows.append([
            str(entry["generation"]), str(entry.get("games", "-")),
            str(entry.get("positions", "-")), f"{sum(entry.get('cpu_s', {}).values()):.0f}",
            f"{arena['score']:.3f}{'*' if entry.get('promoted') else ''}" if arena else "-",
            str(entry.get("best_generation", "")),
            f"{entry['losses']['total']:.3f}" if "losses" in entry else "-",
            *[(f"{rates[name]['network']:.4f}/{rates[name]['puct']:.4f}" if name in rates
               else "-") for name in labels]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
                     for row in rows)


def _draw_arena(axes, history: list[dict[str, Any]], threshold: float) -> None:
    played = [entry for entry in history if "arena" in entry]
    axes.plot([e["generation"] for e in played], [e["arena"]["score"] for e in played], "o-",
              label="candidate's arena score")
    for entry in played:
        if entry.get("promoted"):
            axes.plot(entry["generation"], entry["arena"]["score"], "g*", markersize=12)
    axes.axhline(threshold, color="grey", linestyle="--", label="gating threshold")
    axes.set_ylabel("score against the best")
    axes.legend(loc="lower right", fontsize="small")


def _draw_rates(axes, history: list[dict[str, Any]]) -> None:
    labels = sorted({name for entry in history for name in _rates(entry)})
    for name in labels:
        rows = [e for e in history if name in _rates(e)]
        x = [e["generation"] for e in rows]
        first = _rates(rows[0])[name]
        axes.plot(x, [_rates(e)[name]["network"] for e in rows], "o--",
                  label=f"{name}, network alone")
        axes.plot(x, [_rates(e)[name]["puct"] for e in rows], "o-",
                  label=f"{name}, PUCT {first['simulations']} sims")
    if "exact" in labels:
        for target in TARGETS:
            axes.axhline(target, color="grey", linestyle=":", linewidth=0.8)
    axes.set_ylabel("moves keeping the outcome")
    axes.legend(loc="lower right", fontsize="small")


def _draw_losses(axes, history: list[dict[str, Any]]) -> None:
    trained = [entry for entry in history if "losses" in entry]
    x = [e["generation"] for e in trained]
    for key, label in (("policy_cross_entropy", "policy cross-entropy (nats)"),
                       ("value_mse", "value MSE"), ("total", "total")):
        axes.plot(x, [e["losses"][key] for e in trained], "o-", label=label)
    axes.set_ylabel("training loss")
    axes.legend(loc="upper right", fontsize="small")


def plot_history(checkpoint: Path, output: Path) -> str:
    """Writes the learning-curve figure to `output` (PNG, SVG or PDF by its suffix): arena
    score, rates and losses by generation; returns the text table (`table`).

    Raises:
        CheckpointError: see `read_history`.
    """
    history, settings = read_history(checkpoint)
    figure, (top, middle, bottom) = pyplot.subplots(3, 1, figsize=(8, 10), sharex=True)
    _draw_arena(top, history, settings.get("arena_threshold", 0.55))
    _draw_rates(middle, history)
    _draw_losses(bottom, history)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_xlabel("generation")
    game = settings.get("game", "connect4")
    board = "" if game == "tictactoe" else f" {settings.get('board', '7x6')}"
    figure.suptitle(f"AlphaZero learning curve, {game}{board} ({checkpoint})")
    figure.tight_layout()
    figure.savefig(output)
    pyplot.close(figure)
    return table(history)
