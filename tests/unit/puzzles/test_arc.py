"""ARC: reader, dihedral and colour augmentation, inverses, voting."""

import json

import numpy as np
import pytest

from libs.puzzles.arc import (
    IDENTITY,
    ArcAugmentation,
    MalformedTask,
    Prediction,
    dihedral,
    inverse_dihedral,
    random_arc_augmentation,
    read_split,
    read_task,
    vote,
)

SET = "arc-agi-1"
"""The ARC-AGI-1 data set's folder (its tasks under data/), found by `data_dir`."""


def test_reads_a_real_task(data_dir):
    task = read_task(data_dir / SET / "data" / "training" / "007bbfb7.json")
    assert task.task_id == "007bbfb7"
    assert len(task.train) == 5 and len(task.test) == 1
    assert task.train[0].input.shape == (3, 3) and task.train[0].output.shape == (9, 9)
    assert task.test[0].output.dtype == np.uint8


def test_reads_a_split(data_dir):
    tasks = read_split(data_dir / SET / "data" / "evaluation", limit=5)
    assert len(tasks) == 5
    assert [t.task_id for t in tasks] == sorted(t.task_id for t in tasks)


@pytest.mark.parametrize(
    "payload",
    [
        {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": []},
        {"train": [{"input": [[10]], "output": [[1]]}], "test": []},
        {"train": [], "test": [{"output": [[1]]}]},
        {"train": []},
    ],
)
def test_rejects_malformed_tasks(tmp_path, payload):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(MalformedTask):
        read_task(path)


def test_eight_distinct_dihedral_transforms_with_inverses():
    grid = np.arange(6, dtype=np.uint8).reshape(2, 3)
    images = {dihedral(grid, t).tobytes() + bytes(dihedral(grid, t).shape) for t in range(8)}
    assert len(images) == 8
    for t in range(8):
        assert np.array_equal(inverse_dihedral(dihedral(grid, t), t), grid)
    # Numbering as in HRM/TRM common.py: 1 is a 90-degree counter-clockwise rotation, 6 transpose.
    assert np.array_equal(dihedral(grid, 1), np.rot90(grid))
    assert np.array_equal(dihedral(grid, 6), grid.T)


def test_augmentation_keeps_background_and_inverts(data_dir):
    task = read_task(data_dir / SET / "data" / "training" / "007bbfb7.json")
    rng = np.random.default_rng(0)
    for _ in range(30):
        aug = random_arc_augmentation(rng)
        assert aug.colour_map[0] == 0
        augmented = aug.apply_task(task)
        for original, changed in zip(
            task.train + task.test, augmented.train + augmented.test, strict=True
        ):
            assert np.array_equal(changed.input == 0, dihedral(original.input == 0, aug.transform))
            assert np.array_equal(aug.invert(changed.input), original.input)
            assert np.array_equal(aug.invert(changed.output), original.output)


def test_augmentation_rejects_moving_background():
    with pytest.raises(ValueError):
        ArcAugmentation(0, np.array([1, 0, 2, 3, 4, 5, 6, 7, 8, 9], dtype=np.uint8))
    with pytest.raises(ValueError):
        ArcAugmentation(8, IDENTITY.colour_map)


def test_voting_maps_back_and_ranks_by_votes_then_confidence():
    truth = np.array([[0, 1, 2], [3, 0, 4]], dtype=np.uint8)
    wrong = np.array([[0, 1, 2], [3, 0, 5]], dtype=np.uint8)
    other = np.array([[7]], dtype=np.uint8)
    rng = np.random.default_rng(3)
    augs = [random_arc_augmentation(rng) for _ in range(6)]
    predictions = [Prediction(a.apply(truth), a, 0.4) for a in augs[:3]]
    predictions += [Prediction(a.apply(wrong), a, 0.9) for a in augs[3:5]]
    predictions += [Prediction(other, IDENTITY, 0.99)]
    answers = vote(predictions, top_k=2)
    assert len(answers) == 2
    assert np.array_equal(answers[0].grid, truth) and answers[0].votes == 3
    assert answers[0].mean_confidence == pytest.approx(0.4)
    assert np.array_equal(answers[1].grid, wrong) and answers[1].votes == 2
    # Equal votes: the more confident answer first.
    tie = vote([Prediction(truth, IDENTITY, 0.2), Prediction(other, IDENTITY, 0.8)], top_k=2)
    assert np.array_equal(tie[0].grid, other)
