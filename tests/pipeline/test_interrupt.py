"""Ctrl-C during the warm start stops it and says honestly that nothing was saved (issue 19)."""

from __future__ import annotations

import io
import os
import signal

import pytest
from pipeline_helpers import EXAMPLES, tiny_frozen_lake

pytestmark = [pytest.mark.ray]

CONFIG = EXAMPLES / "frozen_lake" / "grpo.yaml"


class CtrlCOnce(io.StringIO):
    """A progress stream that presses Ctrl-C (SIGINT to this process) when ``trigger`` is printed."""

    def __init__(self, trigger: str):
        super().__init__()
        self.trigger, self.pressed = trigger, False

    def write(self, text: str) -> int:
        if not self.pressed and self.trigger in text:
            self.pressed = True
            os.kill(os.getpid(), signal.SIGINT)
        return super().write(text)


def test_ctrl_c_during_the_warm_start_stops_it_and_saves_nothing(ray_session, tmp_path):
    from roll_core.config import load_config, resolve
    from roll_core.pipeline import launch

    overrides = tiny_frozen_lake(tmp_path, max_steps="2", **{"warmup_sft.steps": "100"})
    stream = CtrlCOnce("warm start 10/100")
    code = launch(resolve(load_config(str(CONFIG), overrides)), stream=stream)
    out = stream.getvalue()
    assert stream.pressed and code == 130
    assert "interrupt: stopping before the first RL step" in out
    assert "stopped during the warm start, after 11 of 100 supervised steps; nothing was saved" in out
    assert "checkpoint saved" not in out and "step 1/2" not in out
    assert not list((tmp_path / "ckpt").glob("checkpoint-*"))
