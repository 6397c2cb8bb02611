"""trained_episodes.jsonl: the episodes of a batch by id with their oldest token's version; a run
starting at step s keeps the lines up to s."""

from __future__ import annotations

import torch

from roll_core.pipeline import trained_record


def test_episodes_name_each_group_episode_once_with_its_oldest_token_version():
    # 3 rows: two members of (group 1, episode 4) and one of (group 0, episode 7); -1 = not a response token
    data = {"group_id": [1, 1, 0], "episode_id": [4, 4, 7], "seed": [11, 11, 23],
            "token_versions": torch.tensor([[-1, 3, 3, -1], [-1, 2, 3, 3], [-1, -1, 5, -1]])}
    assert trained_record.episodes(data) == [
        {"group": 1, "episode": 4, "seed": 11, "rows": 2, "oldest_token": 2},
        {"group": 0, "episode": 7, "seed": 23, "rows": 1, "oldest_token": 5}]
    rlvr = {"group_ids": ["train-b1-p0", "train-b1-p0", "train-b1-p1"],
            "token_versions": torch.tensor([[-1, 0], [-1, 1], [-1, -1]])}
    assert trained_record.episodes(rlvr) == [
        {"group": "train-b1-p0", "rows": 2, "oldest_token": 0}, {"group": "train-b1-p1", "rows": 1, "oldest_token": None}]
    assert trained_record.episodes({"input_ids": torch.zeros(2, 3)}) == []  # nothing names the rows


def test_a_run_starting_at_a_checkpoint_drops_the_steps_after_it(tmp_path):
    for step in (1, 2, 3):
        trained_record.append(str(tmp_path), step, step - 1, [{"group": 0, "episode": step}])
    trained_record.truncate(str(tmp_path), 2)  # resumed from checkpoint-2: step 3 is trained again
    trained_record.append(str(tmp_path), 3, 2, [{"group": 0, "episode": 9}])
    lines = trained_record.read(str(tmp_path))
    assert [(line["step"], line["version"], line["episodes"][0]["episode"]) for line in lines] == \
        [(1, 0, 1), (2, 1, 2), (3, 2, 9)]
    trained_record.truncate(str(tmp_path), 0)  # a fresh run in the same directory
    assert trained_record.read(str(tmp_path)) == []
    trained_record.truncate(str(tmp_path / "missing"), 0)  # no file yet: nothing to do
