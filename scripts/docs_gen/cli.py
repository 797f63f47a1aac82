"""docs/reference/cli.md: every `mcts-mesh` command's help, from its argparse parser."""

from __future__ import annotations

import argparse

from scripts.docs_gen.md import GENERATED, anchor, cell, code


def _subcommands(parser: argparse.ArgumentParser
                 ) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, one-line help) of `parser`'s subcommands, in the order they were added."""
    out = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk of subparsers
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}  # noqa: SLF001
            out += [(name, child, helps.get(name, "")) for name, child in action.choices.items()]
    return out


def _walk(parser: argparse.ArgumentParser, path: list[str], summary: str = ""
          ) -> list[tuple[list[str], str, str]]:
    """(command words, help text, one-line help) of `parser` and every command below it."""
    out = [(path, parser.format_help(), summary)]
    for name, child, line in _subcommands(parser):
        out += _walk(child, [*path, name], line)
    return out


def page() -> str:
    """The whole page."""
    from mcts_mesh.cli import build_parser

    commands = _walk(build_parser(), ["mcts-mesh"])
    out = [GENERATED.format(source="mcts_mesh/cli (build_parser)"), "", "# CLI", "",
           "`mcts-mesh`, installed in `.venv/bin` by `make setup`. `up` and `serve` run services, "
           "`train` runs training jobs, `puzzles` writes puzzle files; every other command is a "
           "client of the orchestrator's gRPC API at `--target` (default `127.0.0.1:50051`), "
           "sending `--api-key` (or `$MCTS_MESH_API_KEY`) as `x-api-key`. Every command's "
           "`--help` prints what is below.", "", "| command | what it does |", "|---|---|"]
    for words, _, summary in commands[1:]:
        name = " ".join(words)
        out.append(f"| [{code(name)}](#{anchor(name)}) | {cell(summary)} |")
    out.append("")
    for words, help_text, _ in commands:
        name = " ".join(words)
        out += [f"## {name} {{ #{anchor(name)} }}", "", "```text", help_text.rstrip(), "```", ""]
    return "\n".join(out)
