"""Generated FrozenLake maps: always solvable, a pure function of the seed (processes, threads)."""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from roll_env_frozenlake.maps import DOWN, LEFT, RIGHT, UP, generate_map, optimal_first_moves, shortest_path

from roll_core.envs import make_env


def test_1000_maps_are_solvable_and_solve_reaches_the_goal():
    sizes, ps = [3, 4, 5, 6, 8, 10], [0.5, 0.65, 0.8, 0.9]
    for seed in range(1000):
        env = make_env("frozen_lake", size=sizes[seed % len(sizes)], p=ps[seed % len(ps)], is_slippery=False,
                       max_steps=200)
        env.reset(seed=seed)
        plan = env.solve()
        assert plan, f"seed {seed}: no path on\n{env.render_text()}"
        for word in plan:
            _, reward, terminated, _, _ = env.step(env.parser.format(word))
        assert terminated and reward == 1.0 and env.success, f"seed {seed}"


def test_solve_is_shortest():
    desc = ["SFFF", "HHHF", "FFFF", "GHHH"]
    assert shortest_path(desc, (0, 0)) == [2, 2, 2, 1, 1, 0, 0, 0, 1]  # around the holes
    assert shortest_path(["SH", "HG"], (0, 0)) is None


def test_optimal_first_moves_lists_every_tie():
    # goal down-right, both ways open: Down and Right both start a 6-move walk; shortest_path's
    # search order finds Down first
    assert optimal_first_moves(["SFFF", "FFFF", "FFFF", "FFFG"], (0, 0)) == [DOWN, RIGHT]
    assert shortest_path(["SFFF", "FFFF", "FFFF", "FFFG"], (0, 0))[0] == DOWN
    # the hole below leaves Right alone
    assert optimal_first_moves(["SFFF", "HFFF", "FFFF", "FFFG"], (0, 0)) == [RIGHT]
    # from the middle, goal straight up: Up only; goal at the far corner: Left and Up
    assert optimal_first_moves(["FGFF", "FFFF", "FSFF", "FFFF"], (2, 1)) == [UP]
    assert optimal_first_moves(["GFFF", "FFFF", "FFSF", "FFFF"], (2, 2)) == [LEFT, UP]
    # a wall of holes: the only shortest walk goes round it
    assert optimal_first_moves(["SFFF", "HHHF", "FFFF", "GHHH"], (0, 0)) == [RIGHT]
    # nothing to do on the goal, in a hole or cut off
    assert optimal_first_moves(["SFFF", "FFFF", "FFFF", "FFFG"], (3, 3)) == []
    assert optimal_first_moves(["SH", "HG"], (0, 0)) == []
    assert optimal_first_moves(["SFH", "FHF", "HFG"], (1, 1)) == []


def test_optimal_first_moves_agree_with_shortest_path_on_500_maps():
    rng = np.random.default_rng(0)
    ties = 0
    for _ in range(500):
        desc = generate_map(5, 0.75, rng)
        start = next((r, row.index("S")) for r, row in enumerate(desc) if "S" in row)
        moves, path = optimal_first_moves(desc, start), shortest_path(desc, start)
        assert path[0] in moves and moves == sorted(moves)
        for move in moves:  # each listed move leaves a walk one shorter
            dr, dc = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}[move]
            rest = shortest_path(desc, (start[0] + dr, start[1] + dc))
            assert rest is not None and len(rest) == len(path) - 1
        ties += len(moves) > 1
    assert 100 < ties < 400  # ties are common: the tie-break mattered


def test_hopeless_density_is_a_clear_error(monkeypatch):
    from roll_env_frozenlake import maps

    monkeypatch.setattr(maps, "MAX_ATTEMPTS", 3)
    with pytest.raises(ValueError, match="raise p"):
        generate_map(30, 1e-9, np.random.default_rng(0))


def _maps(seeds):
    return [make_env("frozen_lake", size=6).reset(seed=s)[1]["map"] for s in seeds]


def test_same_seed_same_map_and_observations_across_processes():
    seeds = list(range(20))
    code = ("import json\nfrom roll_core.envs import make_env\n"
            f"print(json.dumps([make_env('frozen_lake', size=6).reset(seed=s)[1]['map'] for s in {seeds!r}]))")
    outputs = []
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=60)
        outputs.append(json.loads(out.stdout))
    assert outputs[0] == outputs[1] == _maps(seeds)
    assert len({"".join(m) for m in outputs[0]}) == len(seeds)


def test_eight_threads_generate_the_same_maps_as_one():
    seeds = list(range(400))
    sequential = _maps(seeds)
    chunks = [seeds[i::8] for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(_maps, chunks))
    threaded = {s: m for chunk, maps in zip(chunks, results) for s, m in zip(chunk, maps)}
    assert [threaded[s] for s in seeds] == sequential
