"""The replay buffer: self-play positions stored as shards on disk, so that self-play actors and the
learner can be separate processes (they share only the directory).

A shard is one `.npz` file (numpy's zip of arrays, read with `allow_pickle=False`), named
`gen-GGGG-<source>-<n>.npz` where GGGG is the generation of the network that played it:
- planes uint8 [N, 2, H, W] (`Boards.encode`), legal bool [N, A], policy float32 [N, A] (root
  visit shares; [N, 2, 6, 7] and A = 7 on the standard Connect Four board), value float32 [N]
  (the game's outcome for the player to move: 1, 0, -1);
- meta: a 0-d unicode array holding JSON (format, format_version, generation, games, source).
Shards are written to a hidden temporary file and renamed, so a reader never sees half a shard.
The directory's `replay.json` names the format version that wrote it; a directory written by a
newer version is refused. A shard that cannot be read (truncated, corrupt, wrong shapes, a newer
version) is renamed `*.bad`, reported with its path, and left out: the buffer goes on with the
good shards.

The learner samples from a window of the most recent generations; shards older than the window are
deleted (`roll`). The left-right mirror of every position is added when the window is loaded
(Connect Four's one symmetry; for tic-tac-toe one of its eight), its actions permuted by the
game's `mirror_actions`. A shard of another game or board size has other shapes and is left out.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from training.az.boards import Boards
from training.az.games import STANDARD_GAME, GameRecord

FORMAT = "mcts-mesh-replay"
FORMAT_VERSION = 1
INDEX_FILE = "replay.json"
log = logging.getLogger(__name__)


class ReplayError(ValueError):
    """A replay file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Examples:
    """Training rows: planes float32 [N, 2, H, W], legal bool [N, A], policy float32 [N, A],
    value float32 [N]."""

    planes: np.ndarray
    legal: np.ndarray
    policy: np.ndarray
    value: np.ndarray

    def __len__(self) -> int:
        return len(self.value)

    def mirrored(self, game: Boards = STANDARD_GAME) -> Examples:
        """The left-right mirror of every row: planes flipped along W, and the mirrored action
        `game.mirror_actions[a]` taking action a's legality and policy."""
        return self.transformed(game.mirror_planes, game.mirror_actions)

    def transformed(self, planes_map, actions: np.ndarray) -> Examples:
        """Every row under one symmetry (`Boards.symmetries`): `planes_map` applied to the
        planes, and action `actions[a]` taking action a's legality and policy."""
        inverse = np.argsort(actions)
        return Examples(np.ascontiguousarray(planes_map(self.planes)),
                        self.legal[:, inverse].copy(), self.policy[:, inverse].copy(),
                        self.value.copy())

    def with_symmetries(self, game: Boards = STANDARD_GAME) -> Examples:
        """The rows followed by their images under each of the game's symmetries
        (`Boards.symmetries`: Connect Four's mirror, tic-tac-toe's seven)."""
        images = [self.transformed(planes_map, actions)
                  for planes_map, actions in game.symmetries()]
        return Examples.concatenate([self, *images], game)

    @staticmethod
    def concatenate(parts: list[Examples], game: Boards = STANDARD_GAME) -> Examples:
        if not parts:
            a = game.num_actions
            return Examples(np.zeros((0, 2, game.rows, game.columns), np.float32),
                            np.zeros((0, a), np.bool_), np.zeros((0, a), np.float32),
                            np.zeros(0, np.float32))
        return Examples(*(np.concatenate([getattr(p, name) for p in parts])
                          for name in ("planes", "legal", "policy", "value")))


def game_examples(records: list[GameRecord], game: Boards = STANDARD_GAME) -> Examples:
    """Every searched position of every game (a random opening's are not; mirrors not
    included)."""
    positions, masks, values, policies = [], [], [], []
    for record in records:
        position = np.zeros(1, dtype=np.int64)
        mask = np.zeros(1, dtype=np.int64)
        for ply, char in enumerate(record.moves):
            if ply >= record.opening:  # a random opening's positions have no policy
                positions.append(position[0])
                masks.append(mask[0])
                values.append(0.0 if record.winner < 0 else (1.0 if record.winner == ply % 2
                                                             else -1.0))
            position, mask, _ = game.play(position, mask, np.array([int(char) - 1]))
        policies.append(record.policies)
    position = np.array(positions, dtype=np.int64)
    mask = np.array(masks, dtype=np.int64)
    return Examples(game.encode(position, mask), game.legal(mask),
                    np.concatenate(policies).astype(np.float32) if policies
                    else np.zeros((0, game.num_actions), np.float32),
                    np.array(values, dtype=np.float32))


class ReplayBuffer:
    """The shard directory (see the module doc)."""

    def __init__(self, directory: Path | str, game: Boards = STANDARD_GAME) -> None:
        """Creates the directory and its `replay.json` if missing; `game` sets the shards'
        shapes (Connect Four 7x6 by default).

        Raises:
            ReplayError: `replay.json` is unreadable, of another format, or written by a newer
                format version.
        """
        self.directory = Path(directory)
        self.game = game
        self.directory.mkdir(parents=True, exist_ok=True)
        index = self.directory / INDEX_FILE
        if index.exists():
            try:
                document = json.loads(index.read_text())
                version = int(document["format_version"])
                found = document["format"]
            except (ValueError, KeyError, TypeError) as error:
                raise ReplayError(f"{index}: not a {FORMAT} index ({error!r})") from error
            if found != FORMAT:
                raise ReplayError(f"{index}: format {found!r}, not a {FORMAT} index")
            if version > FORMAT_VERSION:
                raise ReplayError(f"{index}: written by format version {version}, newer than "
                                  f"this program's {FORMAT_VERSION}; use a newer mcts-mesh or "
                                  "another --run-dir")
        else:
            _write_atomically(index, lambda path: path.write_text(json.dumps(
                {"format": FORMAT, "format_version": FORMAT_VERSION}) + "\n"))

    def write(self, records: list[GameRecord], generation: int, source: str,
              cpu_s: float = 0.0, network: int = -1) -> Path:
        """Writes the positions of `records` as a new shard of `generation` (the learner's
        generation they are for); returns its path.

        Args:
            cpu_s: CPU-seconds the games took (recorded in the header).
            network: the generation of the network that played them.
        """
        examples = game_examples(records, self.game)
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "generation": generation,
                "games": len(records), "positions": len(examples), "source": source,
                "cpu_s": round(cpu_s, 3), "network": network}
        number = 0
        while True:
            path = self.directory / f"gen-{generation:04d}-{source}-{number:06d}.npz"
            if not path.exists():
                break
            number += 1

        def save(target: Path) -> None:
            with target.open("wb") as handle:
                np.savez(handle, planes=examples.planes.astype(np.uint8), legal=examples.legal,
                         policy=examples.policy, value=examples.value,
                         meta=np.array(json.dumps(meta)))

        _write_atomically(path, save)
        return path

    def shards(self) -> list[tuple[int, Path]]:
        """(generation, path) of every shard, oldest generation first."""
        found = []
        for path in sorted(self.directory.glob("gen-*.npz")):
            try:
                found.append((int(path.name.split("-")[1]), path))
            except (IndexError, ValueError):
                continue
        return found

    def produced(self, generation: int) -> dict[str, float]:
        """Games, positions and self-play CPU-seconds in the good shards of `generation` (from
        the shards' headers)."""
        total = {"games": 0, "positions": 0, "cpu_s": 0.0}
        for shard_generation, path in self.shards():
            if shard_generation == generation:
                try:
                    meta = read_shard(path, meta_only=True, game=self.game)[1]
                except ReplayError as error:
                    self._quarantine(path, error)
                    continue
                for key in total:
                    total[key] += meta.get(key, 0)
        return total

    def load(self, first_generation: int, mirror: bool) -> tuple[Examples, dict]:
        """The positions of every good shard from `first_generation` on, plus their symmetric
        images when `mirror` (`Examples.with_symmetries`); and a summary (shards, positions,
        generations, bad shards)."""
        parts, generations, bad = [], set(), []
        for generation, path in self.shards():
            if generation < first_generation:
                continue
            try:
                examples, _ = read_shard(path, game=self.game)
            except ReplayError as error:
                bad.append(self._quarantine(path, error))
                continue
            parts.append(examples)
            generations.add(generation)
        data = Examples.concatenate(parts, self.game)
        positions = len(data)
        if mirror:
            data = data.with_symmetries(self.game)
        return data, {"shards": len(parts), "positions": positions,
                      "rows_with_mirrors": len(data), "generations": sorted(generations),
                      "bad_shards": bad}

    def roll(self, first_generation: int) -> int:
        """Deletes the shards older than `first_generation`; returns how many."""
        removed = 0
        for generation, path in self.shards():
            if generation < first_generation:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def _quarantine(self, path: Path, error: ReplayError) -> str:
        log.error("replay shard left out: %s", error)
        try:
            path.rename(path.with_name(path.name + ".bad"))
        except OSError:
            pass
        return str(error)


def read_shard(path: Path, meta_only: bool = False, game: Boards = STANDARD_GAME
               ) -> tuple[Examples | None, dict]:
    """Reads and checks one shard of `game` (its shapes).

    Raises:
        ReplayError: unreadable (truncated, not a zip, a pickle), missing or mis-shaped arrays,
            values outside their ranges, or a newer format version; the message names the file.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            meta = json.loads(str(archive["meta"]))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise ReplayError(f"{path}: not a {FORMAT} shard")
            if int(meta.get("format_version", 0)) > FORMAT_VERSION:
                raise ReplayError(f"{path}: format version {meta['format_version']}, newer than "
                                  f"this program's {FORMAT_VERSION}")
            if meta_only:
                return None, meta
            arrays = {name: archive[name] for name in ("planes", "legal", "policy", "value")}
    except ReplayError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise ReplayError(f"{path}: unreadable shard ({type(error).__name__}: {error})") from error
    n = len(arrays["value"])
    a = game.num_actions
    expected = {"planes": (n, 2, game.rows, game.columns), "legal": (n, a), "policy": (n, a),
                "value": (n,)}
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            raise ReplayError(f"{path}: array {name!r} has shape {arrays[name].shape}, "
                              f"expected {shape}")
    policy, value = arrays["policy"].astype(np.float32), arrays["value"].astype(np.float32)
    if not (np.isfinite(policy).all() and (policy >= 0).all() and np.isfinite(value).all()
            and (np.abs(value) <= 1).all()):
        raise ReplayError(f"{path}: policy or value out of range")
    return Examples(arrays["planes"].astype(np.float32), arrays["legal"].astype(np.bool_),
                    policy, value), meta


def _write_atomically(path: Path, write) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
