"""The terminal env: each episode is a task in a fresh sandboxed work directory; each turn the
agent runs one shell command and sees its output; ``submit`` ends the episode and the task's
check decides the reward.

Every command runs in :mod:`roll_core.sandbox` (no network, nothing outside the work directory,
none of the trainer's environment variables, limits per command); the work directory persists
across the episode's commands and nothing else does (no process outlives its command).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, field_validator

from roll_core.envs import EnvConfig, StepOutcome, TextEnv
from roll_core.sandbox import Limits, Sandbox, python_executable
from roll_core.sandbox.runner import BASE_ENV
from roll_env_terminal.builtin_tasks import BUILTIN
from roll_env_terminal.tasks import Task, load_tasks

SUBMIT = "submit"


class TerminalConfig(EnvConfig):
    """``env_config`` of ``terminal``; EnvConfig contributes max_steps, format_penalty, ..."""

    max_steps: int = Field(8, ge=1, description="Commands (turns) per episode, the submit included.")
    tiers: list[int] = Field([1, 2, 3], description="Built-in task tiers to draw from (1 easiest, 3 hardest).")
    tasks_path: str | None = Field(None, description="Your own tasks (a .jsonl file or a directory, see README); "
                                   "replaces the built-in ones.")
    max_output_chars: int = Field(1000, ge=100, description="Command output kept in an observation (head and tail).")
    command_timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit of one command.")
    command_memory_mb: int = Field(512, ge=64, description="Address-space limit of one command.")
    episode_time_s: float = Field(60.0, gt=0, description="Total command time of an episode; past it the episode "
                                  "ends with the check run as things are.")
    sandbox_mode: str | None = Field(None, description="roll_core.sandbox mode; default $ROLL_SANDBOX or namespaces.")

    @field_validator("tiers")
    @classmethod
    def _tiers(cls, value: list[int]) -> list[int]:
        if not value or set(value) - set(BUILTIN):
            raise ValueError(f"tiers must be a non-empty subset of {sorted(BUILTIN)}, got {value}")
        return sorted(set(value))


class TerminalEnv(TextEnv):
    """Solve a small task in a Linux shell: one command per turn, ``submit`` (or ``submit ANSWER``) at the end.

    Reward 1 when the task's check passes at submit (or when the turns run out), else 0. A
    response without an ``<answer>COMMAND</answer>`` costs ``format_penalty``.
    """

    config_model = TerminalConfig
    action_lookup = None  # free-form: the command itself is the action

    def __init__(self, config: TerminalConfig | dict[str, Any] | None = None, **overrides: Any):
        super().__init__(config, **overrides)
        cfg = self.config
        self.tasks: list[Task] | None = load_tasks(cfg.tasks_path) if cfg.tasks_path else None
        self.makers = [m for tier in cfg.tiers for m in BUILTIN[tier]]
        self.limits = Limits(wall_s=cfg.command_timeout_s, cpu_s=max(1, int(cfg.command_timeout_s)),
                             memory_mb=cfg.command_memory_mb, processes=64, output_bytes=max(4096, 4 * cfg.max_output_chars))
        # python3 for the tasks: the system's, else the trainer's base interpreter (bound read-only, on PATH)
        python, self.python_binds = python_executable()
        self.python_env = {"PATH": f"{os.path.dirname(python)}:{BASE_ENV['PATH']}"} if self.python_binds else {}
        self.box: Sandbox | None = None
        self.task: Task | None = None
        self.history: list[str] = []
        self.text = ""
        self.time_used = 0.0

    def default_instruction(self) -> str:
        return ("You are in a Linux shell, in a directory holding the task's files. Each turn, run exactly one "
                f"shell command, written as {self.parser.format('ls')}; you will see its output and exit status. "
                f"There is no network. When the task is done, answer {self.parser.format(SUBMIT)}, or "
                f"{self.parser.format(SUBMIT + ' ANSWER')} when the task asks for an answer. You have "
                f"{self.config.max_steps} turns. A passing check gives reward 1.")

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task" in options:
            self.task = options["task"]
        elif self.tasks is not None:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        else:
            self.task = self.makers[int(self.np_random.integers(len(self.makers)))](self.np_random)
        if self.box is not None:
            self.box.close()
        self.box = Sandbox(self.task.files, limits=self.limits, mode=self.config.sandbox_mode, ro_binds=self.python_binds,
                           env=self.python_env)
        self.history, self.time_used = [], 0.0
        listing = ", ".join(sorted(self.task.files)) or "(none)"
        self.text = f"Task: {self.task.instruction}\nFiles: {listing}"
        return self.text, {"task_id": self.task.id, "tier": self.task.tier}

    def _step(self, action: str) -> StepOutcome | None:
        command = action.strip()
        if not command:
            return None
        self.history.append(command)
        words = command.split(maxsplit=1)
        if words[0].lower() == SUBMIT:
            return self._finish(words[1] if len(words) > 1 else "", "submitted")
        result = self.box.run(command)
        self.time_used += result.wall_s
        self.text = f"$ {command}\n{self._clip(result.stdout + result.stderr)}[{result.summary()}]"
        info = {"sandbox_reason": result.reason}
        if self.time_used >= self.config.episode_time_s:
            return self._finish(None, f"out of time ({self.time_used:.0f} s of commands)", info)
        if self.num_steps >= self.config.max_steps:  # the last turn: judge the directory as it is
            return self._finish(None, "out of turns", info)
        return StepOutcome(reward=0.0, info=info)

    def _finish(self, answer: str | None, how: str, info: dict[str, Any] | None = None) -> StepOutcome:
        passed, why = self.task.check.run(self.box, answer, self.limits)
        verdict = "the check passed" if passed else f"the check failed: {why}"
        self.text = (self.text + "\n" if how != "submitted" else "") + f"{how.capitalize()}; {verdict}."
        return StepOutcome(reward=float(passed), terminated=True, success=passed,
                           info={**(info or {}), "check": why, "task_id": self.task.id})

    def _clip(self, output: str) -> str:
        limit = self.config.max_output_chars
        if len(output) > limit:
            half = limit // 2
            output = f"{output[:half]}\n[... {len(output) - limit} characters cut ...]\n{output[-half:]}"
        return output if not output or output.endswith("\n") else output + "\n"

    def render_text(self) -> str:
        return self.text

    def valid_actions(self) -> list[str]:
        """Commands worth trying now: look around, read the task's files, submit."""
        files = sorted(self.task.files)[:3] if self.task else []
        return ["ls", *(f"cat {name}" for name in files), SUBMIT]

    def example_action(self) -> str:
        return "ls"

    def solve(self) -> list[str]:
        """The task's solution commands not yet played (all of them again after a detour)."""
        solution = list(self.task.solution) if self.task else []
        done = len(self.history)
        return solution[done:] if self.history == solution[:done] else solution

    def close(self) -> None:
        if self.box is not None:
            self.box.close()
            self.box = None
