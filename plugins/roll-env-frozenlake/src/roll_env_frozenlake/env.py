"""FrozenLake as a roll text env, on gymnasium's FrozenLake transition model.

Each ``reset(seed)`` draws a new solvable map from the seed (unless ``map_seed`` pins one); the
moves, slipping and rewards are gymnasium's (its ``P`` table, sampled with this env's generator).
The text view follows ROLL's vocabulary: ``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal,
``X`` player in a hole, ``√`` player on the goal.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLake
from pydantic import Field, field_validator, model_validator

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.envs.render import grid_to_rgb, make_tile, overlay

from .maps import DOWN, LEFT, MOVES, RIGHT, UP, find, generate_map, optimal_first_moves, shortest_path

# cell codes of the rendered grid (keys of ``grid_lookup``)
PLAYER, FROZEN, HOLE, GOAL, PLAYER_IN_HOLE, PLAYER_ON_GOAL = range(6)
CELL_MEANINGS = {
    PLAYER: "you",
    FROZEN: "frozen ice (safe)",
    HOLE: "a hole",
    GOAL: "the goal",
    PLAYER_IN_HOLE: "you fell into a hole",
    PLAYER_ON_GOAL: "you reached the goal",
}
LETTER_CODES = {"S": FROZEN, "F": FROZEN, "H": HOLE, "G": GOAL}  # map letter -> cell code, player aside
DEFAULT_GRID_LOOKUP = {PLAYER: "P", FROZEN: "_", HOLE: "O", GOAL: "G", PLAYER_IN_HOLE: "X", PLAYER_ON_GOAL: "√"}


class FrozenLakeConfig(EnvConfig):
    """``env_config`` of ``frozen_lake`` (ROLL's field names)."""

    size: int = Field(8, ge=2, le=64, description="Side length of the square map.")
    p: float = Field(0.8, gt=0.0, le=1.0, description="Probability that a tile is frozen (not a hole).")
    is_slippery: bool = Field(True, description="Moves may slip sideways (gymnasium's dynamics).")
    success_rate: float = Field(
        1.0 / 3.0, gt=0.0, le=1.0, description="Chance a slippery move goes where intended."
    )
    map_seed: int | None = Field(None, description="Pins one map for every reset when set.")
    render_mode: Literal["text", "rgb_array"] = Field("text", description="Default mode of render().")
    grid_lookup: dict[int, str] = Field(
        default_factory=lambda: dict(DEFAULT_GRID_LOOKUP),
        description="Cell code -> symbol: 0 player, 1 frozen, 2 hole, 3 goal, 4 player in hole, 5 player on goal.",
    )
    grid_vocab: dict[str, str] | None = Field(
        None, description="Symbol -> meaning shown in the instruction; derived from grid_lookup when unset."
    )
    show_neighbours: bool = Field(
        False,
        description="Follow the grid with a line naming the cell each action leads to "
                    "('Left - Down O Right G Up #'; edge_symbol off the map).",
    )
    edge_symbol: str = Field("#", min_length=1, description="What show_neighbours writes for a move off the map.")

    @field_validator("grid_lookup")
    @classmethod
    def _complete_lookup(cls, value: dict[int, str]) -> dict[int, str]:
        if set(value) != set(CELL_MEANINGS):
            raise ValueError(f"grid_lookup needs exactly the codes {sorted(CELL_MEANINGS)}")
        if len(set(value.values())) != len(value) or not all(value.values()):
            raise ValueError("grid_lookup symbols must be distinct and non-empty")
        return value

    @model_validator(mode="after")
    def _edge_apart(self) -> FrozenLakeConfig:
        cells = {symbol.strip() for symbol in self.grid_lookup.values()}
        if self.show_neighbours and self.edge_symbol.strip() in cells:
            raise ValueError(f"edge_symbol {self.edge_symbol!r} is also a cell of grid_lookup, so show_neighbours "
                             "could not tell the edge from that cell; set edge_symbol to another symbol")
        return self


class FrozenLakeEnv(TextEnv):
    """FrozenLake: reach the goal ``G`` without stepping into a hole ``O``; reward 1 at the goal.

    Actions are ``Left``, ``Down``, ``Right``, ``Up`` (any case). A new solvable map is drawn
    from each reset's seed; with ``is_slippery`` a move goes sideways with gymnasium's odds.
    """

    config_model = FrozenLakeConfig
    action_lookup = {"Left": LEFT, "Down": DOWN, "Right": RIGHT, "Up": UP}
    action_words = {index: word for word, index in action_lookup.items()}
    inline_calls = True  # pure computation, microseconds a call

    def __init__(self, config: FrozenLakeConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.render_mode = self.config.render_mode
        self.desc: list[str] = []
        self.position: tuple[int, int] = (0, 0)
        self._transitions: dict[int, dict[int, list[tuple[float, int, float, bool]]]] = {}
        self._tiles: dict[int, np.ndarray] | None = None

    # -- the contract ----------------------------------------------------------------------
    def default_instruction(self) -> str:
        lookup, cfg = self.config.grid_lookup, self.config
        vocab = cfg.grid_vocab or {lookup[code]: meaning for code, meaning in CELL_MEANINGS.items()}
        symbols = "; ".join(f"{symbol} = {meaning}" for symbol, meaning in vocab.items())
        slip = (
            " The ice is slippery: a move may take you sideways instead of where you meant to go."
            if cfg.is_slippery else ""
        )
        return (
            f"You are playing FrozenLake on a {cfg.size}x{cfg.size} grid. Walk from your position to the "
            f"goal without stepping into a hole. Symbols: {symbols}. The grid is shown row by row, top "
            f"to bottom.{slip} Each turn choose one action: Left, Down, Right or Up. Reaching the goal "
            f"gives reward 1; falling into a hole ends the game. Answer in the format "
            f"{self.parser.format('Left')}."
        )

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "desc" in options:  # a hand-made map (tests, curricula)
            desc = [str(row) for row in options["desc"]]
        else:
            rng = self.np_random if self.config.map_seed is None else np.random.default_rng(self.config.map_seed)
            desc = generate_map(self.config.size, self.config.p, rng)
        self._transitions = _transitions(tuple(desc), self.config.is_slippery, self.config.success_rate)
        self.desc = desc
        self.position = find(desc, "S")
        return self.observation(), {"map": list(desc)}

    def _step(self, action: int) -> StepOutcome:
        cols = len(self.desc[0])
        state = self.position[0] * cols + self.position[1]
        transitions = self._transitions[state][action]
        probs = np.array([t[0] for t in transitions])
        index = int(self.np_random.choice(len(transitions), p=probs / probs.sum()))
        _, new_state, reward, terminated = transitions[index]
        new_position = divmod(int(new_state), cols)
        effective = new_position != self.position
        self.position = new_position
        success = self.desc[new_position[0]][new_position[1]] == "G"
        return StepOutcome(
            reward=float(reward), terminated=bool(terminated), effective=effective, success=success,
            info={"position": new_position},
        )

    def render_text(self) -> str:
        return "\n".join("".join(self.config.grid_lookup[c] for c in row) for row in self._codes())

    def observation(self) -> str:
        """The grid, and with ``show_neighbours`` the line of what each action leads to.

        A model reads "the cell below P" from a flattened grid as one row's length of tokens back;
        the tiny model misses it about one decision in ten (docs/learning.md), the line puts each
        neighbour right after the action that reaches it.
        """
        grid = self.render_text()
        return f"{grid}\n{self.neighbours_line()}" if self.config.show_neighbours else grid

    def neighbours_line(self) -> str:
        """``Left - Down O Right - Up #``: each action word, then the symbol of the cell it leads to."""
        lookup = self.config.grid_lookup
        words = []
        for action, (dr, dc) in MOVES.items():
            r, c = self.position[0] + dr, self.position[1] + dc
            inside = 0 <= r < len(self.desc) and 0 <= c < len(self.desc[0])
            symbol = lookup[LETTER_CODES[self.desc[r][c]]] if inside else self.config.edge_symbol
            words.append(f"{self.action_words[action]} {symbol.strip()}")
        return " ".join(words)

    def render_rgb(self) -> np.ndarray:
        if self._tiles is None:
            self._tiles = _tiles()
        return grid_to_rgb(self._codes(), self._tiles)

    # -- helpers ---------------------------------------------------------------------------
    def _codes(self) -> np.ndarray:
        codes = np.array([[LETTER_CODES[ch] for ch in row] for row in self.desc], dtype=np.int64)
        r, c = self.position
        codes[r, c] = {FROZEN: PLAYER, HOLE: PLAYER_IN_HOLE, GOAL: PLAYER_ON_GOAL}[int(codes[r, c])]
        return codes

    def solve(self) -> list[str] | None:
        """Shortest action words from the current position to the goal, ignoring slipping.

        Optimal for ``is_slippery: false``; with slipping, re-plan after every step. ``[]`` on the
        goal, ``None`` in a hole (no way out).
        """
        path = shortest_path(self.desc, self.position)
        return None if path is None else [self.action_words[a] for a in path]

    def optimal_actions(self) -> list[str]:
        """Every action word that begins a shortest walk to the goal from here (ignoring slipping).

        The scripted policy draws among them, so demonstrations show each optimal move, not
        :meth:`solve`'s tie-break (which prefers Left, then Down, then Right, then Up).
        """
        return [self.action_words[a] for a in optimal_first_moves(self.desc, self.position)]


@functools.lru_cache(maxsize=128)
def _transitions(desc: tuple[str, ...], is_slippery: bool, success_rate: float) -> dict:
    """gymnasium's transition table ``P`` of a map, built once per map.

    Building it is most of a reset's cost, and the envs of a group replay one map; the table is
    only read, so sharing it between envs of one process is safe. The members of a group reset
    within moments of each other, so a short memory suffices (a table of a 4x4 map is ~14 KiB).
    """
    return GymFrozenLake(desc=list(desc), is_slippery=is_slippery, success_rate=success_rate).P


def _tiles() -> dict[int, np.ndarray]:
    ice, edge = (206, 232, 248), (168, 200, 224)
    hole = make_tile(ice, shape="circle", color=(24, 40, 72), scale=0.8, border=edge)
    goal = make_tile(ice, shape="diamond", color=(46, 160, 67), scale=0.8, border=edge)
    player = make_tile(ice, shape="circle", color=(214, 56, 48), scale=0.55, border=edge)
    return {
        PLAYER: player,
        FROZEN: make_tile(ice, border=edge),
        HOLE: hole,
        GOAL: goal,
        PLAYER_IN_HOLE: overlay(hole, make_tile(ice, shape="cross", color=(214, 56, 48), scale=0.5),
                                shape="cross", scale=0.5),
        PLAYER_ON_GOAL: overlay(goal, player, shape="circle", scale=0.4),
    }
