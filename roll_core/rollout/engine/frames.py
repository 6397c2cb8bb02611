"""GIFs of validation episodes (``render_save_dir``), drawn from the env's ``rgb_array`` frames."""

from __future__ import annotations

import os
from typing import Any

from roll_core.envs.render import save_gif


def save_episode_gif(frames: list[Any], directory: str, trajectory: Any) -> str | None:
    """Write ``frames`` as ``<directory>/<tag>_g<group>_e<episode>_m<member>.gif``; None without frames.

    Frames an env could not draw are ``None`` and skipped; an env without rgb rendering simply
    gets no GIF rather than failing its episode.
    """
    frames = [f for f in frames if f is not None]
    if not frames:
        return None
    name = f"{trajectory.tag}_g{trajectory.group_id}_e{trajectory.episode_id}_m{trajectory.member}.gif"
    return str(save_gif(frames, os.path.join(directory, name)))
