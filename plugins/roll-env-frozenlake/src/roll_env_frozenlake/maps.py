"""Random solvable FrozenLake maps and shortest paths on them.

Maps use gymnasium's FrozenLake letters (``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal) so
gymnasium's transition model applies unchanged. Everything here is a pure function of its
arguments and the generator passed in: the same seed gives the same map in any process or thread.
"""

from __future__ import annotations

from collections import deque

import numpy as np

#: gymnasium's action indices, in its order
LEFT, DOWN, RIGHT, UP = 0, 1, 2, 3
MOVES: dict[int, tuple[int, int]] = {LEFT: (0, -1), DOWN: (1, 0), RIGHT: (0, 1), UP: (-1, 0)}

MAX_ATTEMPTS = 10_000


def shortest_path(desc: list[str], start: tuple[int, int]) -> list[int] | None:
    """Action indices of a shortest hole-free walk from ``start`` to ``G`` (deterministic moves).

    ``[]`` when ``start`` is the goal; ``None`` when no walk exists or ``start`` is a hole.
    """
    if desc[start[0]][start[1]] == "H":
        return None
    parent: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if desc[cell[0]][cell[1]] == "G":
            path = []
            while parent[cell] is not None:
                cell, action = parent[cell]
                path.append(action)
            return path[::-1]
        for action, nxt in open_moves(desc, cell):
            if nxt not in parent:
                parent[nxt] = (cell, action)
                queue.append(nxt)
    return None


def optimal_first_moves(desc: list[str], start: tuple[int, int]) -> list[int]:
    """Every action index that begins a shortest hole-free walk from ``start`` to ``G``, in index order.

    :func:`shortest_path` returns one walk, whose first move is a tie-break of its search order
    (Left before Down before Right before Up); a policy that clones it may learn that order as a
    preference. ``[]`` when ``start`` is the goal, a hole, or cut off from the goal.
    """
    goal = find(desc, "G")
    distance = {goal: 0}  # hole-free distance to the goal (moves are reversible); holes never enter
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        for _, nxt in open_moves(desc, cell):
            if nxt not in distance:
                distance[nxt] = distance[cell] + 1
                queue.append(nxt)
    if start not in distance:
        return []
    return [action for action, nxt in open_moves(desc, start) if distance.get(nxt, -1) == distance[start] - 1]


def open_moves(desc: list[str], cell: tuple[int, int]) -> list[tuple[int, tuple[int, int]]]:
    """``(action, next cell)`` of every move from ``cell`` that stays on the map and off the holes."""
    moves = []
    for action, (dr, dc) in MOVES.items():
        nxt = (cell[0] + dr, cell[1] + dc)
        if 0 <= nxt[0] < len(desc) and 0 <= nxt[1] < len(desc[0]) and desc[nxt[0]][nxt[1]] != "H":
            moves.append((action, nxt))
    return moves


def generate_map(size: int, p: float, rng: np.random.Generator) -> list[str]:
    """A ``size x size`` map: each tile frozen with probability ``p``, start and goal at random
    distinct cells, redrawn until the goal is reachable from the start (BFS-checked)."""
    if size < 2:
        raise ValueError(f"FrozenLake size must be at least 2, got {size}")
    for _ in range(MAX_ATTEMPTS):
        frozen = rng.random((size, size)) < p
        start, goal = rng.choice(size * size, size=2, replace=False)
        grid = np.where(frozen, "F", "H")
        grid.flat[start] = "S"
        grid.flat[goal] = "G"
        desc = ["".join(row) for row in grid]
        if shortest_path(desc, divmod(int(start), size)) is not None:
            return desc
    raise ValueError(
        f"No solvable {size}x{size} FrozenLake map in {MAX_ATTEMPTS} tries with frozen probability p={p}; "
        "raise p."
    )


def find(desc: list[str], letter: str) -> tuple[int, int]:
    """Row and column of the first ``letter`` in ``desc``."""
    for r, row in enumerate(desc):
        c = row.find(letter)
        if c >= 0:
            return r, c
    raise ValueError(f"map has no {letter!r} tile")
