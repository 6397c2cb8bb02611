"""Frames and GIFs without pygame."""

import numpy as np
import pytest
from PIL import Image

from roll_core.envs.render import grid_to_rgb, make_tile, overlay, save_gif


def test_tiles_and_grid():
    red = make_tile((255, 0, 0), size=8)
    blue_dot = make_tile((0, 0, 0), shape="circle", color=(0, 0, 255), size=8)
    frame = grid_to_rgb(np.array([[0, 1], [1, 0]]), {0: red, 1: blue_dot})
    assert frame.shape == (16, 16, 3) and frame.dtype == np.uint8
    assert tuple(frame[0, 0]) == (255, 0, 0) and tuple(frame[4, 12]) == (0, 0, 255)
    assert tuple(frame[12, 4]) == (0, 0, 255) and tuple(frame[8, 8]) == (255, 0, 0)
    both = overlay(red, blue_dot, shape="circle", scale=0.3)
    assert tuple(both[4, 4]) == (0, 0, 255) and tuple(both[0, 0]) == (255, 0, 0)
    with pytest.raises(ValueError, match="shape"):
        make_tile((0, 0, 0), shape="star")


def test_save_gif_round_trip(tmp_path):
    frames = [np.full((10, 12, 3), v, dtype=np.uint8) for v in (0, 120, 250)]
    frames.append(np.zeros((6, 6, 3), dtype=np.uint8))  # a smaller frame is padded
    path = save_gif(frames, tmp_path / "sub" / "episode.gif")
    with Image.open(path) as image:
        assert image.n_frames == 4 and image.size == (12, 10)
    with pytest.raises(ValueError):
        save_gif([], tmp_path / "empty.gif")
    with pytest.raises(ValueError):
        save_gif([np.zeros((4, 4), dtype=np.uint8)], tmp_path / "gray.gif")
