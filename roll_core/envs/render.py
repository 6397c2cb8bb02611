"""Frames for grid envs and GIFs of episodes, with numpy and Pillow only (no pygame).

Grid envs draw an RGB frame by pasting one small tile per cell (:func:`grid_to_rgb`); tiles are
built from a fill colour and an optional shape (:func:`make_tile`). Keeping this here means every
env draws the same way and no env needs a display or an extra dependency.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

Color = tuple[int, int, int]

SHAPES = ("none", "square", "circle", "diamond", "cross", "ring")


def _shape_mask(shape: str, size: int, scale: float) -> np.ndarray:
    """Boolean ``size x size`` mask of ``shape`` centred in the cell, ``scale`` of its width."""
    centre = (size - 1) / 2.0
    yy, xx = np.mgrid[0:size, 0:size]
    dy, dx = (yy - centre) / (size / 2.0), (xx - centre) / (size / 2.0)
    r = scale
    masks = {
        "none": lambda: np.zeros((size, size), dtype=bool),
        "square": lambda: (np.abs(dx) <= r) & (np.abs(dy) <= r),
        "circle": lambda: dx**2 + dy**2 <= r**2,
        "diamond": lambda: np.abs(dx) + np.abs(dy) <= r,
        "cross": lambda: ((np.abs(dx - dy) <= 0.18) | (np.abs(dx + dy) <= 0.18))
        & (np.abs(dx) <= r) & (np.abs(dy) <= r),
        "ring": lambda: (dx**2 + dy**2 <= r**2) & (dx**2 + dy**2 >= (r * 0.6) ** 2),
    }
    if shape not in masks:
        raise ValueError(f"unknown tile shape {shape!r}; use one of {SHAPES}")
    return masks[shape]()


def make_tile(fill: Color, *, shape: str = "none", color: Color = (0, 0, 0), scale: float = 0.7,
              size: int = 32, border: Color | None = None) -> np.ndarray:
    """A ``size x size x 3`` uint8 tile: ``fill`` background, ``shape`` drawn in ``color`` on top."""
    tile = np.empty((size, size, 3), dtype=np.uint8)
    tile[:] = fill
    tile[_shape_mask(shape, size, scale)] = color
    if border is not None:
        tile[0, :] = tile[-1, :] = tile[:, 0] = tile[:, -1] = border
    return tile


def overlay(base: np.ndarray, top: np.ndarray, *, shape: str, scale: float = 0.6) -> np.ndarray:
    """``base`` with the ``shape`` region replaced by ``top`` (for a player standing on a goal)."""
    out = base.copy()
    mask = _shape_mask(shape, base.shape[0], scale)
    out[mask] = top[mask]
    return out


def grid_to_rgb(grid: np.ndarray, tiles: Mapping[int, np.ndarray]) -> np.ndarray:
    """Paste ``tiles[code]`` for every cell of the integer ``grid``; returns ``H x W x 3`` uint8."""
    grid = np.asarray(grid)
    codes = sorted(tiles)
    size = tiles[codes[0]].shape[0]
    stack = np.zeros((max(codes) + 1, size, size, 3), dtype=np.uint8)
    for code in codes:
        stack[code] = tiles[code]
    cells = stack[grid]  # rows x cols x size x size x 3
    rows, cols = grid.shape
    return cells.transpose(0, 2, 1, 3, 4).reshape(rows * size, cols * size, 3)


def save_gif(frames: Sequence[np.ndarray], path: str | Path, *, duration_ms: int = 400,
             loop: int = 0) -> Path:
    """Write RGB ``frames`` (``H x W x 3`` uint8) as an animated GIF; returns the path.

    Frames of different sizes are padded to the largest so one episode always makes one GIF.
    """
    from PIL import Image

    if not frames:
        raise ValueError("save_gif needs at least one frame")
    arrays = [np.asarray(f, dtype=np.uint8) for f in frames]
    for a in arrays:
        if a.ndim != 3 or a.shape[2] != 3:
            raise ValueError(f"frames must be H x W x 3 uint8 arrays, got shape {a.shape}")
    height = max(a.shape[0] for a in arrays)
    width = max(a.shape[1] for a in arrays)
    images = []
    for a in arrays:
        canvas = np.zeros((height, width, 3), dtype=np.uint8)
        canvas[: a.shape[0], : a.shape[1]] = a
        images.append(Image.fromarray(canvas))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms,
                   loop=loop)
    return path
