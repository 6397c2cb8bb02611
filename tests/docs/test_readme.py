"""The README as a front page: its config tour resolves, CI runs its test command, its links exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from roll_core.config import resolve, validate_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_config_tour_validates_and_resolves(roll_registry):
    """README, "A config": the YAML block is a whole agentic config (FrozenLake from roll-env-frozenlake)."""
    tour = re.search(r"## A config\n.*?```yaml\n(.*?)```", README, re.S).group(1)
    assert len(tour.strip().splitlines()) <= 12
    run = resolve(validate_config(yaml.safe_load(tour)), registry=roll_registry)
    assert run.config.adv_estimator == "grpo" and run.config.rollout_batch_size == 64
    assert run.envs["FrozenLake"].registration.name == "frozen_lake"
    assert run.config.train_env_manager.num_env_groups * run.config.train_env_manager.group_size == 64


def test_ci_runs_exactly_the_readme_test_command():
    commands = re.findall(r"```bash\n(.*?)\n```", README, re.S)
    test_command = next(c for c in commands if "nox -s" in c)
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci, f".ci/run does not run the README's test command {test_command!r}"
    assert "nox -s lint tests isolated wheels docs" in test_command


def test_relative_links_point_at_files_that_exist():
    links = re.findall(r"\]\(((?!https?://)[^)#\s]+)(?:#[^)]*)?\)", README)
    assert len(links) > 20
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
