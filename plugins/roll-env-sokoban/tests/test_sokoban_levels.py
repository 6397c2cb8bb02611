"""Generated Sokoban levels: always solvable, a pure function of the seed (processes, threads)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from roll_env_sokoban.levels import generate_level, parse_level
from roll_env_sokoban.solver import solve_level

from roll_core.envs import make_env


def test_1000_small_levels_are_solvable():
    env = make_env("sokoban", dim_room=[6, 6], num_boxes=1)
    lengths = []
    for seed in range(1000):
        env.reset(seed=seed)
        plan = env.solve()
        assert plan, f"seed {seed}: no solution for\n{env.render_text()}"
        lengths.append(len(plan))
        if seed < 100:  # and the plan really solves it in the env
            for word in plan:
                _, _, terminated, _, _ = env.step(env.parser.format(word))
            assert terminated and env.success, f"seed {seed}"
    assert np.mean(lengths) > 4  # reverse play makes real puzzles, not one-push levels


@pytest.mark.parametrize("dim_room,num_boxes,count", [((8, 8), 2, 20), ((10, 10), 3, 4), ((7, 9), 2, 10)])
def test_larger_levels_are_solvable(dim_room, num_boxes, count):
    for seed in range(count):
        level = generate_level(dim_room, num_boxes, 300, np.random.default_rng(seed))
        assert len(level.boxes) == num_boxes and not level.solved
        assert solve_level(level, max_nodes=2_000_000) is not None, f"seed {seed}"


def test_search_depth_bounds_the_solution_length():
    for seed in range(50):
        level = generate_level((8, 8), 2, 6, np.random.default_rng(seed))
        assert 1 <= len(solve_level(level)) <= 6


def _levels(seeds):
    return [make_env("sokoban", dim_room=[7, 7], num_boxes=2).reset(seed=s)[0] for s in seeds]


def test_same_seed_same_level_across_processes():
    seeds = list(range(20))
    code = ("import json, sys\nfrom roll_core.envs import make_env\n"
            "print(json.dumps([make_env('sokoban', dim_room=[7, 7], num_boxes=2).reset(seed=s)[0] "
            f"for s in {seeds!r}]))")
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=env, timeout=60)
        outputs.append(json.loads(out.stdout))
    assert outputs[0] == outputs[1] == _levels(seeds)
    assert len(set(outputs[0])) == len(seeds)  # and seeds do give different levels


def test_eight_threads_generate_the_same_levels_as_one():
    seeds = list(range(400))
    sequential = _levels(seeds)
    chunks = [seeds[i::8] for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(_levels, chunks))
    threaded = {s: level for chunk, levels in zip(chunks, results) for s, level in zip(chunk, levels)}
    assert [threaded[s] for s in seeds] == sequential


def test_solver_reports_unsolvable_and_budget():
    stuck = parse_level(["######", "#X__O#", "#P___#", "######"])  # box in a corner
    assert solve_level(stuck) is None
    level = generate_level((10, 10), 3, 300, np.random.default_rng(0))
    assert solve_level(level, max_nodes=10) is None
    assert solve_level(parse_level(["#####", "#P_√#", "#####"])) == []
