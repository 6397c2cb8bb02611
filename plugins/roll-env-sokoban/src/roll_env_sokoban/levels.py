"""Procedural Sokoban levels by reverse play from the solved state.

A level starts solved (every box on its target) in a randomly carved room; reverse play (the
player walking backwards, pulling boxes) then explores the positions the solved state can be
reached from. Every pull is the exact reverse of a legal push, so every state found is solvable
by construction; one of those farthest from the solution (breadth-first, up to ``search_depth``
reverse moves) becomes the level.

All randomness comes from the ``numpy.random.Generator`` passed in and no module state is touched,
so the same seed gives the same level in any process, on any number of threads at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: cell codes of a rendered grid (keys of ``grid_lookup``)
WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)

#: action words -> (row delta, column delta), in ROLL's order
DIRECTIONS: dict[str, tuple[int, int]] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}

MAX_TRIES = 200
FLOOR_FRACTION = 0.6  # share of the room's interior carved into floor
TURN_PROBABILITY = 0.35  # chance the carving walk changes direction at each step
WIDEN_PROBABILITY = 0.3  # chance the carving walk also opens a neighbouring cell
MAX_SEARCH_STATES = 30_000  # reverse-play budget: bigger rooms stop at the depth reached by then


@dataclass(frozen=True)
class Level:
    """One Sokoban position: cells are flat indices ``row * cols + col`` into a walled room."""

    walls: tuple[bool, ...]
    rows: int
    cols: int
    targets: frozenset[int]
    boxes: frozenset[int]
    player: int

    def offsets(self) -> dict[str, int]:
        """Flat-index step for each action word (walls on the border keep it from wrapping)."""
        return {word: dr * self.cols + dc for word, (dr, dc) in DIRECTIONS.items()}

    def codes(self) -> np.ndarray:
        """The ``rows x cols`` grid of cell codes (``WALL`` ... ``PLAYER_ON_TARGET``)."""
        grid = np.where(np.array(self.walls, dtype=bool), WALL, FLOOR).astype(np.int64)
        grid = grid.reshape(self.rows, self.cols)
        for t in self.targets:
            grid[t // self.cols, t % self.cols] = TARGET
        for b in self.boxes:
            grid[b // self.cols, b % self.cols] = BOX_ON_TARGET if b in self.targets else BOX
        p = self.player
        grid[p // self.cols, p % self.cols] = PLAYER_ON_TARGET if p in self.targets else PLAYER
        return grid

    @property
    def solved(self) -> bool:
        return self.boxes <= self.targets


def _carve_room(rows: int, cols: int, min_floor: int, rng: np.random.Generator) -> np.ndarray:
    """A connected floor (``True``) carved by a turning random walk inside a one-cell wall border."""
    floor = np.zeros((rows, cols), dtype=bool)
    interior = (rows - 2) * (cols - 2)
    wanted = max(min_floor, int(round(FLOOR_FRACTION * interior)))
    moves = list(DIRECTIONS.values())
    r, c = int(rng.integers(1, rows - 1)), int(rng.integers(1, cols - 1))
    direction = moves[int(rng.integers(4))]
    for _ in range(50 * interior):
        floor[r, c] = True
        if rng.random() < WIDEN_PROBABILITY:
            dr, dc = moves[int(rng.integers(4))]
            if 1 <= r + dr < rows - 1 and 1 <= c + dc < cols - 1:
                floor[r + dr, c + dc] = True
        if floor.sum() >= wanted:
            break
        if rng.random() < TURN_PROBABILITY:
            direction = moves[int(rng.integers(4))]
        nr, nc = r + direction[0], c + direction[1]
        if 1 <= nr < rows - 1 and 1 <= nc < cols - 1:
            r, c = nr, nc
        else:
            direction = moves[int(rng.integers(4))]
    return floor


def _reverse_search(solved: Level, depth_limit: int) -> list[tuple[int, frozenset[int]]]:
    """Breadth-first reverse play from every solved position; the states found deepest.

    A reverse move walks the player one cell and may pull the box behind it along. Starting from
    all solved states at once, a state's BFS depth is exactly the length of its shortest forward
    solution, so the deepest states are the hardest puzzles this room and these targets allow.
    """
    walls, steps = solved.walls, list(solved.offsets().values())
    frontier = [(p, solved.targets) for p in range(len(walls)) if not walls[p] and p not in solved.targets]
    seen = set(frontier)
    deepest: list[tuple[int, frozenset[int]]] = []
    for _ in range(depth_limit):
        layer = []
        for player, boxes in frontier:
            for step in steps:
                nxt = player + step
                if walls[nxt] or nxt in boxes:
                    continue
                children = [(nxt, boxes)]
                if player - step in boxes:
                    children.append((nxt, (boxes - {player - step}) | {player}))
                for child in children:
                    if child not in seen:
                        seen.add(child)
                        layer.append(child)
        if not layer:
            break
        frontier = deepest = layer
        if len(seen) > MAX_SEARCH_STATES:
            break
    return deepest


def generate_level(dim_room: tuple[int, int], num_boxes: int, search_depth: int,
                   rng: np.random.Generator) -> Level:
    """A solvable level in a ``dim_room`` room (border walls included) with ``num_boxes`` boxes.

    Rooms and targets whose reverse play cannot move any box off its target are redrawn (up to
    ``MAX_TRIES`` times, still from ``rng``, so the result stays a function of the seed).
    """
    rows, cols = dim_room
    min_floor = 2 * num_boxes + 3
    if (rows - 2) * (cols - 2) < min_floor:
        raise ValueError(f"a {rows}x{cols} room is too small for {num_boxes} box(es)")
    for _ in range(MAX_TRIES):
        floor = _carve_room(rows, cols, min_floor, rng)
        cells = np.flatnonzero(floor)
        if len(cells) < num_boxes + 1:
            continue
        chosen = rng.choice(cells, size=num_boxes + 1, replace=False)
        targets = frozenset(int(x) for x in chosen[:num_boxes])
        solved = Level(tuple(bool(w) for w in ~floor.ravel()), rows, cols, targets, targets, int(chosen[-1]))
        deepest = _reverse_search(solved, search_depth)
        if deepest:  # empty when no box can ever leave its target in this room
            player, boxes = deepest[int(rng.integers(len(deepest)))]
            return Level(solved.walls, rows, cols, targets, boxes, player)
    raise RuntimeError(
        f"could not generate a {rows}x{cols} Sokoban level with {num_boxes} box(es) in {MAX_TRIES} tries; "
        "use a larger dim_room, fewer boxes or a larger search_depth"
    )



#: the default text symbols, for :func:`parse_level`
SYMBOLS = {"#": WALL, "_": FLOOR, "O": TARGET, "√": BOX_ON_TARGET, "X": BOX, "P": PLAYER, "S": PLAYER_ON_TARGET}


def parse_level(rows: list[str], symbols: dict[str, int] | None = None) -> Level:
    """A :class:`Level` from its text rendering (hand-made levels for tests and curricula)."""
    symbols = symbols or SYMBOLS
    if len({len(r) for r in rows}) != 1:
        raise ValueError("all rows of a level must have the same length")
    codes = [[symbols[ch] for ch in row] for row in rows]
    n_rows, n_cols = len(rows), len(rows[0])
    flat = [c for row in codes for c in row]
    border = [flat[i] for i in range(len(flat))
              if i // n_cols in (0, n_rows - 1) or i % n_cols in (0, n_cols - 1)]
    if any(c != WALL for c in border):
        raise ValueError("a level must be enclosed by walls")
    players = [i for i, c in enumerate(flat) if c in (PLAYER, PLAYER_ON_TARGET)]
    if len(players) != 1:
        raise ValueError(f"a level needs exactly one player, found {len(players)}")
    targets = frozenset(i for i, c in enumerate(flat) if c in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET))
    boxes = frozenset(i for i, c in enumerate(flat) if c in (BOX, BOX_ON_TARGET))
    if len(boxes) != len(targets):
        raise ValueError(f"{len(boxes)} boxes but {len(targets)} targets")
    return Level(tuple(c == WALL for c in flat), n_rows, n_cols, targets, boxes, players[0])
