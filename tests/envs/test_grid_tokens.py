"""The example grids keep their shape in the tiny tokenizer's tokens (every row the same number).

The FrozenLake demo's ice was ``" _"`` until 2026-11-28, and the tiny tokenizer merges ``" _\\n"``
into one token: "the cell below" was 4 or 5 tokens on depending on the map. Fixing it lifted the
warm start's clone at both seeds measured (docs/learning.md).
"""

from pathlib import Path

import pytest
import yaml

from roll_core.envs import make_env
from roll_core.testing import GridTokensError, check_grid_tokens
from roll_core.testing.grid_tokens import split_row

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer():
    from roll_core.models.policy_tokenizer import tiny_tokenizer

    return tiny_tokenizer()


def example_env(path: str):
    """The first custom env of an example config, built as the run builds it (type and env_config)."""
    spec = next(iter(yaml.safe_load((ROOT / path).read_text())["custom_envs"].values()))
    return make_env(spec["env_type"], spec["env_config"])


@pytest.mark.parametrize("path, seeds", [("examples/frozen_lake/grpo.yaml", 300), ("examples/sokoban/starpo.yaml", 20)])
def test_example_grids_keep_their_shape(tokenizer, path, seeds):
    env = example_env(path)
    symbols = list(env.config.grid_lookup.values())
    for seed in range(seeds):  # a map per seed: every kind of cell at the end of a row, sooner or later
        env.reset(seed=seed)
        check_grid_tokens(tokenizer, env.render_text(), symbols)


def test_a_cell_merged_with_the_row_break_is_named(tokenizer):
    grid = " _ _ P _\n O _ O _\n _ _ _ O\n _ G O _"  # the demo's old ice: " _\n" is one token
    with pytest.raises(GridTokensError, match=r"rows take 4, 4, 5, 4 tokens"):
        check_grid_tokens(tokenizer, grid, [" P", " _", " O", " G"])
    check_grid_tokens(tokenizer, grid.replace("_", "-"), [" P", " -", " O", " G"])


def test_a_cell_split_in_two_tokens_is_named(tokenizer):
    with pytest.raises(GridTokensError, match=r"' ', '\.'"):
        check_grid_tokens(tokenizer, " . P\n P .", [" .", " P"])


def test_text_that_is_no_cell_is_a_clear_error():
    assert split_row(" P -- O", [" P", " -", "-", " O"]) == [" P", " -", "-", " O"]
    with pytest.raises(ValueError, match="'#' at column 2"):
        split_row(" P#", [" P"])


def test_a_last_cell_merged_with_the_break_in_every_row_keeps_the_shape(tokenizer):
    check_grid_tokens(tokenizer, " # _ #\n # P #\n # # #", [" #", " _", " P"])  # " #\n" in every row
