"""``roll env play TAG_OR_TYPE``: play an env in the terminal, seeing exactly what the model sees.

The env is found by registered name or tag, or by a ``custom_envs`` tag of a config (``--config``).
Every prompt is printed as the chat message the model receives (the instruction as the system
message, each observation as a user message built by :mod:`roll_core.envs.prompt`), followed by the
response, the parsed action, the reward and the step metrics: the local multi-turn debugging loop.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from roll_core.errors import ConfigError, RollError, UnknownComponentError, did_you_mean

QUIT_WORDS = {"q", "quit", "exit", ":q"}


def register(subparsers) -> None:
    parser = subparsers.add_parser("env", help="play and debug text environments")
    sub = parser.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    play = sub.add_parser(
        "play", help="play an env in the terminal, printing prompts exactly as the model sees them",
        description="Play an env by keyboard or with a random / scripted policy. Prints the system and "
        "user messages the model would get, then the response, parsed action, reward and metrics.",
    )
    play.add_argument("env", metavar="TAG_OR_TYPE",
                      help="a registered env name or tag (roll plugins list), or a custom_envs tag of --config")
    play.add_argument("--policy", choices=sorted(_play_policies()), default="keyboard",
                      help="who picks the actions (default: keyboard; reads action words from stdin)")
    play.add_argument("--seed", type=int, default=0, help="episode seed (default: 0)")
    play.add_argument("--max-steps", type=int, default=None, help="override env_config.max_steps")
    play.add_argument("--save-gif", metavar="PATH", default=None, help="write the episode's frames as a GIF")
    play.add_argument("--config", metavar="CONFIG.yaml", default=None,
                      help="a roll config whose custom_envs block defines TAG_OR_TYPE")
    play.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                      help="override one env_config field (YAML value), repeatable")
    play.set_defaults(func=cmd_play)


# -- policies ------------------------------------------------------------------------------
class KeyboardPolicy:
    """Reads one response per turn from ``stream`` (a terminal or a pipe).

    A bare action word is wrapped in the env's answer format, so typing ``left`` is what a model
    answering ``<answer>left</answer>`` would do; anything else is sent verbatim (to try malformed
    responses). An empty line, ``q`` or end of input stops the episode.
    """

    def __init__(self, seed: int | None = None, stream: TextIO | None = None, out: TextIO | None = None):
        self.stream = stream or sys.stdin
        self.out = out or sys.stdout

    def __call__(self, env: Any, observation: str) -> str | None:
        try:
            words = "/".join(env.valid_actions())
        except NotImplementedError:
            words = "a response"
        self.out.write(f"your move ({words}; empty line or q quits)> ")
        self.out.flush()
        line = self.stream.readline()
        if not self.stream.isatty():
            self.out.write(line if line.endswith("\n") or not line else line + "\n")
        text = line.strip()
        if not text or text.lower() in QUIT_WORDS:
            return None
        if env.parse(text).content is None and env.parse(env.parser.format(text)).is_valid:
            return env.parser.format(text)
        return text


def _play_policies() -> dict[str, Any]:
    from roll_core.envs.policies import POLICIES

    return {**POLICIES, "keyboard": KeyboardPolicy}


# -- what to play --------------------------------------------------------------------------
@dataclass
class PlaySpec:
    """The env to play and the prompt settings a config gives it."""

    env_type: str
    env_config: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    max_tokens: int | None = None
    system_template: str | None = None
    turn_template: str | None = None


def load_custom_envs(path: str | Path) -> dict[str, dict[str, Any]]:
    """The ``custom_envs`` block of a config YAML, interpolations resolved (``{}`` when absent)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"Config file {str(path)!r} does not exist.")
    try:
        cfg = OmegaConf.load(path)
        block = cfg.get("custom_envs") if hasattr(cfg, "get") else None
        envs = OmegaConf.to_container(block, resolve=True) if block is not None else {}
    except OmegaConfBaseException as exc:
        raise ConfigError(f"Cannot read custom_envs from {str(path)!r}: {exc}") from exc
    if not isinstance(envs, dict):
        raise ConfigError(f"custom_envs in {str(path)!r} must be a mapping of tag -> env settings.")
    return envs


def resolve_play_spec(name: str, config_path: str | None = None) -> PlaySpec:
    """``name`` as a ``custom_envs`` tag of ``config_path`` first, else a registered env name or tag."""
    from roll_core.envs.factory import resolve_env

    custom = load_custom_envs(config_path) if config_path else {}
    if name in custom:
        entry = custom[name] or {}
        if "env_type" not in entry:
            raise ConfigError(f"custom_envs.{name} in {config_path!r} has no env_type.")
        env_config = dict(entry.get("env_config") or {})
        if entry.get("max_steps") is not None:
            env_config.setdefault("max_steps", entry["max_steps"])
        return PlaySpec(entry["env_type"], env_config, label=f"custom_envs.{name}",
                        max_tokens=entry.get("max_tokens_per_step"),
                        system_template=entry.get("agent_system_template"),
                        turn_template=entry.get("agent_template"))
    try:
        resolve_env(name)
    except UnknownComponentError as exc:
        error = _not_an_env(name, exc)
        if not custom:
            raise error from None
        raise RollError(f"{error} Nor is it a custom_envs tag of {config_path!r} (those are: "
                        f"{', '.join(custom)}).{did_you_mean(name, custom)}") from None
    return PlaySpec(name, label=name)


def _not_an_env(name: str, exc: UnknownComponentError) -> RollError:
    """An agent's name or tag gets told what plays agents; anything else, did-you-mean over both kinds."""
    from roll_core.config.resolve import unknown_player
    from roll_core.plugins import get_registry

    registry = get_registry()
    try:
        reg = registry.get("agent", name)
    except UnknownComponentError:
        return UnknownComponentError(unknown_player(registry, name, exc))
    return RollError(
        f"{name!r} is an agent ({reg.name}, plugin {reg.plugin}), not a text env: `roll env play` steps an env "
        "turn by turn, and an agent's turns are its own code. To see its episodes as the model sees them, prompts, "
        "replies and their token counts: `roll rollout CONFIG --policy scripted --dump episodes.jsonl` (its expert "
        f"plays), or `roll_core.testing.check_agent({reg.name!r})` in a test.")


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    import yaml

    values = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise RollError(f"--set expects KEY=VALUE, got {item!r}.")
        values[key.strip()] = yaml.safe_load(raw) if raw.strip() else None
    return values


# -- the loop ------------------------------------------------------------------------------
def _show(message: dict[str, str], title: str, out: TextIO) -> None:
    out.write(f"=== {title} ===\n{message['content']}\n")


def cmd_play(args, out: TextIO | None = None) -> int:
    from roll_core.envs.binding import bind_env, build_env
    from roll_core.envs.prompt import Conversation

    out = out or sys.stdout
    spec = resolve_play_spec(args.env, args.config)
    env_config = {**spec.env_config, **_parse_overrides(args.overrides)}
    if args.max_steps is not None:
        env_config["max_steps"] = args.max_steps
    binding = bind_env(spec.env_type, env_config, config_key=spec.label if args.config else None)
    if binding.python_env is not None:  # an env with its own Python environment is played in it
        from roll_core.distributed.env_python import run_inside

        run_inside(binding.python_env, getattr(args, "argv", None))
    reg, env = binding.registration, build_env(binding)
    policy = _play_policies()[args.policy](args.seed)
    frames = []

    def frame() -> None:
        if args.save_gif:
            frames.append(env.render("rgb_array"))

    observation, _ = env.reset(seed=args.seed)
    frame()
    out.write(f"env {spec.label or args.env} -> {reg.name} ({reg.target}, plugin {reg.plugin}); "
              f"seed {args.seed}; policy {args.policy}; max_steps {env.config.max_steps}\n")
    conversation = Conversation.for_env(env, max_tokens=spec.max_tokens, system_template=spec.system_template,
                                        turn_template=spec.turn_template)
    _show(conversation.messages[0], "system", out)
    _show(conversation.observe(observation, actions_left=env.config.max_steps), "user (turn 1)", out)
    terminated = truncated = False
    while True:
        response = policy(env, observation)
        if response is None:
            out.write("(stopped by the player)\n")
            break
        _show(conversation.respond(response), f"assistant (turn {conversation.turn})", out)
        observation, reward, terminated, truncated, info = env.step(response)
        frame()
        metrics = " ".join(f"{k}={v:g}" for k, v in info["metrics"].items())
        parsed = info.get("parsed_action")
        validity = "valid" if info["metrics"]["action_is_valid"] else "INVALID"
        out.write(f"--- action {parsed!r} ({validity}) | reward {reward:g} | terminated {terminated} | "
                  f"truncated {truncated} | {metrics}\n")
        if terminated or truncated:
            out.write(f"=== final state (not shown to the model) ===\n{observation}\n")
            break
        message = conversation.observe(observation, last_reward=reward,
                                       actions_left=env.config.max_steps - env.num_steps)
        _show(message, f"user (turn {conversation.turn})", out)
    ending = "terminated" if terminated else "truncated" if truncated else "stopped"
    out.write(f"episode {ending} after {env.num_steps} steps: reward {env.episode_reward:g}, "
              f"success {env.success}\n")
    if args.save_gif:
        from roll_core.envs.render import save_gif

        path = save_gif(frames, args.save_gif)
        out.write(f"saved {len(frames)} frames to {path}\n")
    return 0
