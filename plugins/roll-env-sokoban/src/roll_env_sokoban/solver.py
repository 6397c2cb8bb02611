"""Breadth-first Sokoban solver over (player, boxes) states, with a node budget.

Used to prove generated levels solvable and by the scripted policy. Moves are single steps, so a
solution is shortest in steps. Boxes pushed onto "dead" cells (from which no push sequence can
ever bring a box to any target, e.g. non-target corners) are pruned, which keeps the small rooms
roll trains on to a few thousand states.
"""

from __future__ import annotations

from collections import deque

from .levels import Level

DEFAULT_MAX_NODES = 200_000


def live_cells(level: Level) -> frozenset[int]:
    """Cells from which a lone box can still be pushed onto some target (pulls back from targets)."""
    walls, steps = level.walls, list(level.offsets().values())
    live = set(level.targets)
    queue = deque(level.targets)
    while queue:
        cell = queue.popleft()
        for step in steps:
            # pulling a box from ``cell`` to ``cell + step`` needs the player at ``cell + 2 step``
            box_to, player_to = cell + step, cell + 2 * step
            if 0 <= player_to < len(walls) and not walls[box_to] and not walls[player_to] and box_to not in live:
                live.add(box_to)
                queue.append(box_to)
    return frozenset(live)


def solve_level(level: Level, *, max_nodes: int = DEFAULT_MAX_NODES) -> list[str] | None:
    """Shortest action words solving ``level``; ``None`` when unsolvable or over ``max_nodes`` states."""
    if level.solved:
        return []
    walls, targets = level.walls, level.targets
    moves = list(level.offsets().items())
    live = live_cells(level)
    if not level.boxes <= live:
        return None
    start = (level.player, level.boxes)
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        player, boxes = state
        for word, step in moves:
            nxt = player + step
            if walls[nxt]:
                continue
            if nxt in boxes:
                beyond = nxt + step
                if walls[beyond] or beyond in boxes or beyond not in live:
                    continue
                new_boxes = (boxes - {nxt}) | {beyond}
            else:
                new_boxes = boxes
            child = (nxt, new_boxes)
            if child in parent:
                continue
            parent[child] = (state, word)
            if new_boxes <= targets:
                return _path(parent, child)
            if len(parent) > max_nodes:
                return None
            queue.append(child)
    return None


def _path(parent, state) -> list[str]:
    words = []
    while parent[state] is not None:
        state, word = parent[state]
        words.append(word)
    return words[::-1]
