"""Sokoban as a roll text env: procedural levels per seed and ROLL's reward scheme.

Each ``reset(seed)`` generates a level by reverse play (:mod:`roll_env_sokoban.levels`), solvable by
construction. Rewards follow ROLL (and gym-sokoban): ``-0.1`` per step, ``+1`` for pushing a box
onto a target, ``-1`` for pushing one off, ``+10`` once every box is on a target.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.envs.render import grid_to_rgb, make_tile, overlay

from .levels import (
    BOX,
    BOX_ON_TARGET,
    DIRECTIONS,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    Level,
    generate_level,
)
from .solver import DEFAULT_MAX_NODES, solve_level

CELL_MEANINGS = {
    WALL: "wall",
    FLOOR: "empty floor",
    TARGET: "target",
    BOX_ON_TARGET: "box on a target",
    BOX: "box",
    PLAYER: "you (the player)",
    PLAYER_ON_TARGET: "you standing on a target",
}
DEFAULT_GRID_LOOKUP = {WALL: "#", FLOOR: "_", TARGET: "O", BOX_ON_TARGET: "√", BOX: "X", PLAYER: "P",
                       PLAYER_ON_TARGET: "S"}


class SokobanConfig(EnvConfig):
    """``env_config`` of ``sokoban`` (ROLL's field names; ``dim_x``/``dim_y`` set ``dim_room``)."""

    dim_room: tuple[int, int] = Field((6, 6), description="Rows and columns of the room, border walls included.")
    num_boxes: int = Field(1, ge=1, le=10, description="Boxes (and targets) in each level.")
    search_depth: int = Field(300, ge=1, description="Reverse-play steps used to scramble a solved room.")
    render_mode: Literal["text", "rgb_array"] = Field("text", description="Default mode of render().")
    grid_lookup: dict[int, str] = Field(
        default_factory=lambda: dict(DEFAULT_GRID_LOOKUP),
        description="Cell code -> symbol: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player, "
        "6 player on target.",
    )
    grid_vocab: dict[str, str] | None = Field(
        None, description="Symbol -> meaning shown in the instruction; derived from grid_lookup when unset."
    )
    step_penalty: float = Field(-0.1, description="Reward of every valid step.")
    box_on_target_reward: float = Field(1.0, description="Reward for pushing a box onto a target.")
    box_off_target_penalty: float = Field(-1.0, description="Reward for pushing a box off a target.")
    solved_reward: float = Field(10.0, description="Bonus once every box is on a target.")

    @model_validator(mode="before")
    @classmethod
    def _roll_dims(cls, data: Any) -> Any:
        """ROLL configs give ``dim_x`` and ``dim_y``; fold them into ``dim_room``."""
        if isinstance(data, dict) and ("dim_x" in data or "dim_y" in data):
            data = dict(data)
            rows, cols = data.get("dim_room", (6, 6))
            data["dim_room"] = (data.pop("dim_x", rows), data.pop("dim_y", cols))
        return data

    @field_validator("dim_room")
    @classmethod
    def _room_size(cls, value: tuple[int, int]) -> tuple[int, int]:
        if min(value) < 5 or max(value) > 32:
            raise ValueError("each side of dim_room must be between 5 and 32 (walls included)")
        return value

    @field_validator("grid_lookup")
    @classmethod
    def _complete_lookup(cls, value: dict[int, str]) -> dict[int, str]:
        if set(value) != set(CELL_MEANINGS):
            raise ValueError(f"grid_lookup needs exactly the codes {sorted(CELL_MEANINGS)}")
        if len(set(value.values())) != len(value) or not all(value.values()):
            raise ValueError("grid_lookup symbols must be distinct and non-empty")
        return value

    @model_validator(mode="after")
    def _fits(self) -> SokobanConfig:
        rows, cols = self.dim_room
        if (rows - 2) * (cols - 2) < 2 * self.num_boxes + 3:
            raise ValueError(f"a {rows}x{cols} room is too small for {self.num_boxes} box(es)")
        return self


class SokobanEnv(TextEnv):
    """Sokoban: push every box onto a target; boxes can be pushed, never pulled.

    Actions are ``Up``, ``Down``, ``Left``, ``Right`` (any case). Each reset's seed generates a
    new level of ``dim_room`` with ``num_boxes`` boxes, solvable by construction.
    """

    config_model = SokobanConfig
    action_lookup = {word: word for word in DIRECTIONS}
    inline_calls = True  # pure computation (level generation is bounded by search_depth)

    def __init__(self, config: SokobanConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        self.render_mode = self.config.render_mode
        self.level: Level | None = None
        self._tiles: dict[int, np.ndarray] | None = None

    # -- the contract ----------------------------------------------------------------------
    def default_instruction(self) -> str:
        cfg = self.config
        vocab = cfg.grid_vocab or {cfg.grid_lookup[code]: meaning for code, meaning in CELL_MEANINGS.items()}
        symbols = "; ".join(f"{symbol} = {meaning}" for symbol, meaning in vocab.items())
        return (
            "You are solving a Sokoban puzzle. Push every box onto a target. You move one cell per turn; "
            "walking into a box pushes it one cell further if that cell is free. Boxes cannot be pulled, "
            "so a box pushed into a corner or against a wall may never reach a target. "
            f"Symbols: {symbols}. The grid is shown row by row, top to bottom. "
            "Each turn choose one action: Up, Down, Left or Right. "
            f"Rewards: {cfg.step_penalty:g} per step, {cfg.box_on_target_reward:+g} for a box pushed onto "
            f"a target, {cfg.box_off_target_penalty:+g} for one pushed off, {cfg.solved_reward:+g} when "
            f"all boxes are on targets. Answer in the format {self.parser.format('Up')}."
        )

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "level" in options:  # a hand-made level (tests, curricula)
            self.level = options["level"]
        else:
            cfg = self.config
            self.level = generate_level(cfg.dim_room, cfg.num_boxes, cfg.search_depth, self.np_random)
        return self.observation(), {}

    def _step(self, action: str) -> StepOutcome:
        cfg, level = self.config, self.level
        step = level.offsets()[action]
        target = level.player + step
        reward = cfg.step_penalty
        if level.walls[target]:
            return StepOutcome(reward=reward, effective=False)
        boxes = level.boxes
        if target in boxes:
            beyond = target + step
            if level.walls[beyond] or beyond in boxes:
                return StepOutcome(reward=reward, effective=False)
            boxes = (boxes - {target}) | {beyond}
            reward += cfg.box_on_target_reward * (beyond in level.targets)
            reward += cfg.box_off_target_penalty * (target in level.targets)
        self.level = Level(level.walls, level.rows, level.cols, level.targets, boxes, target)
        solved = self.level.solved
        if solved:
            reward += cfg.solved_reward
        return StepOutcome(
            reward=reward, terminated=solved, success=solved,
            info={"boxes_on_target": len(boxes & level.targets)},
        )

    def render_text(self) -> str:
        lookup = self.config.grid_lookup
        return "\n".join("".join(lookup[int(c)] for c in row) for row in self.level.codes())

    def render_rgb(self) -> np.ndarray:
        if self._tiles is None:
            self._tiles = _tiles()
        return grid_to_rgb(self.level.codes(), self._tiles)

    # -- solver ----------------------------------------------------------------------------
    def solve(self, max_nodes: int = DEFAULT_MAX_NODES) -> list[str] | None:
        """Shortest action words from the current state to the solved one.

        ``[]`` when already solved; ``None`` when no solution exists (a box got stuck) or the
        search exceeded ``max_nodes`` states.
        """
        return solve_level(self.level, max_nodes=max_nodes)


def _tiles() -> dict[int, np.ndarray]:
    floor, edge = (232, 222, 196), (214, 202, 172)
    target_ring = (200, 60, 50)
    box, box_done, player = (164, 112, 52), (64, 160, 80), (44, 92, 196)
    target = make_tile(floor, shape="ring", color=target_ring, scale=0.55, border=edge)
    player_tile = make_tile(floor, shape="circle", color=player, scale=0.6, border=edge)
    return {
        WALL: make_tile((84, 70, 62), border=(64, 52, 46)),
        FLOOR: make_tile(floor, border=edge),
        TARGET: target,
        BOX_ON_TARGET: make_tile(floor, shape="square", color=box_done, scale=0.75, border=edge),
        BOX: make_tile(floor, shape="square", color=box, scale=0.75, border=edge),
        PLAYER: player_tile,
        PLAYER_ON_TARGET: overlay(target, player_tile, shape="circle", scale=0.4),
    }
