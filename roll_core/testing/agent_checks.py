"""``check_agent``: does an agent plugin honour roll's agent contract?

The counterpart of :func:`~roll_core.testing.check_env` for ``roll_register_agents`` plugins
(docs/authoring.md, "Agents"). Episodes are played in this process as an env-manager worker plays
them: a real gateway on 127.0.0.1, roll's tiny model's tokenizer and chat template, and the agent's
expert answering every call (the ``scripted`` policy that ``warmup_sft`` and
``roll rollout --policy scripted`` use). Every check runs, then one :class:`AgentCheckError` lists
every problem. What is checked:

* the registration resolves with the given config (the agent's config model validates it);
* the plugin's entry module imports none of the heavy libraries (``torch``, ``ray`` ...);
* the agent has an expert (without one the checks that play are skipped, with a note);
* its episodes, played with the expert: each makes a model call and returns a result roll reads;
  every expert reply fits the per-call cap (``max_tokens``) whole; tool calls it writes parse into
  OpenAI ``tool_calls``; each reply re-renders as it was generated (no template mismatch);
* the same seed plays the same episode (reward and sampled tokens);
* with ``max_steps=1`` the episode still ends as a trajectory (an agent that does not catch the
  refused second call scores 0: a note, since its own reward is lost).

The report's ``reply_tokens`` holds every expert reply's token count (end-of-turn included), and
its notes the range next to the cap: what a call costs in tokens.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll_core.registry import Registry
from roll_core.testing.env_checks import CheckReport, SkipCheck, check_import_light

TAG = "CheckedAgent"


class AgentCheckError(AssertionError):
    """An agent broke the contract; the message lists every failed check."""


@dataclass
class AgentCheckReport(CheckReport):
    """What :func:`check_agent` found; ``reply_tokens``: the token count of every expert reply."""

    CHECK = "check_agent"
    reply_tokens: list[int] = field(default_factory=list)


_Skip = SkipCheck  # a check that cannot run here becomes a note


def play_agent(name: str, agent_config: Mapping[str, Any] | None = None, *, seeds: Sequence[int] = (0,),
               max_steps: int | None = None, max_tokens: int | None = None, sequence_length: int = 1024,
               registry: Registry | None = None) -> list[list[Any]]:
    """Play one episode per seed of agent ``name`` with its expert; the trajectories of each.

    Raises what the rollout would: :class:`~roll_core.errors.ConfigError` for a config or an expert
    reply over the cap, :class:`~roll_core.rollout.engine.episode.EpisodeFailure` for an agent error.
    """
    run = _resolve(name, agent_config, max_steps, max_tokens, sequence_length, registry)
    return asyncio.run(_play(run, seeds))


def _resolve(name, agent_config, max_steps, max_tokens, sequence_length, registry) -> Any:
    from roll_core.config import resolve, validate_config

    entry: dict[str, Any] = {"env_type": name, "env_config": dict(agent_config or {})}
    if max_steps is not None:
        entry["max_steps"] = max_steps
    if max_tokens is not None:
        entry["max_tokens_per_step"] = max_tokens
    config = validate_config({
        "pretrain": "roll-tiny", "sequence_length": sequence_length, "custom_envs": {TAG: entry},
        "train_env_manager": {"num_env_groups": 1, "group_size": 1, "tags": [TAG]},
        "val_env_manager": {"num_env_groups": 1, "group_size": 1, "tags": [TAG]}})
    run = resolve(config, registry=registry, roles=())
    if TAG not in run.agents:
        from roll_core.errors import ConfigError

        raise ConfigError(f"{name!r} is an env, not an agent: check it with check_env.")
    return run


async def _play(run: Any, seeds: Sequence[int]) -> list[list[Any]]:
    from roll_core.chat.codec import ChatCodec
    from roll_core.models.policy_tokenizer import tiny_tokenizer
    from roll_core.rollout.agents.agent import Agent, AgentRuntime
    from roll_core.rollout.engine.messages import Ticket
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    spec = rollout_spec(run, "train", policy="scripted")
    env_spec = spec.envs[TAG]
    agent = Agent.load(env_spec.env)
    runtime = AgentRuntime(spec, ChatCodec(tiny_tokenizer()))
    try:
        return [await runtime.play(agent, env_spec, Ticket(group_id=k, episode_id=0, seed=seed, version=0), 0,
                                   route_key=None)
                for k, seed in enumerate(seeds)]
    finally:
        await runtime.stop()


def check_agent(name: str, agent_config: Mapping[str, Any] | None = None, *, seeds: Sequence[int] = (0, 1, 2),
                max_steps: int | None = None, max_tokens: int | None = None, sequence_length: int = 1024,
                registry: Registry | None = None, raise_on_failure: bool = True) -> AgentCheckReport:
    """Check the registered agent ``name`` (see the module docstring).

    ``agent_config`` is validated like ``custom_envs.<tag>.env_config``; ``max_steps`` and
    ``max_tokens`` are the tag's ``max_steps`` and ``max_tokens_per_step`` (use your config's: the
    cap check is only as good as the cap). Raises :class:`AgentCheckError` listing every failure
    (or returns the report with ``raise_on_failure=False``).
    """
    if not seeds:
        raise ValueError("check_agent needs at least one seed")
    manager = None
    if registry is None:
        from roll_core.plugins import get_plugin_manager

        manager = get_plugin_manager()
        registry = manager.registry
    reg = registry.get("agent", name)  # an unknown name raises here, with did-you-mean
    report = AgentCheckReport(name)
    state: dict[str, Any] = {}

    def play(**overrides: Any) -> list[list[Any]]:
        values = dict(max_steps=max_steps, max_tokens=max_tokens, sequence_length=sequence_length, seeds=seeds)
        values.update(overrides)
        return play_agent(name, agent_config, registry=registry, **values)

    def resolved() -> None:
        from roll_core.rollout.engine.episode import turn_sampling
        from roll_core.rollout.engine.spec_from_run import rollout_spec

        state["run"] = run = _resolve(name, agent_config, max_steps, max_tokens, sequence_length, registry)
        spec = rollout_spec(run, "train", policy="scripted")
        state["cap"] = turn_sampling(spec, spec.envs[TAG]).max_new_tokens

    def expert() -> None:
        from roll_core.rollout.agents.agent import Agent

        run = state.get("run")
        if run is None:
            raise _Skip("the config did not resolve")
        if Agent.load(run.agents[TAG]).expert_fn is None:
            state["no_expert"] = True
            raise _Skip("the agent has no expert (expert(task, messages, tools) -> str), so neither warmup_sft "
                        "nor `--policy scripted` can play it; the checks that play episodes are skipped")

    def episodes() -> None:
        _needs_expert(state)
        played = state["episodes"] = play()
        problems = []
        for seed, trajectories in zip(seeds, played):
            problems += _episode_problems(seed, trajectories, max_tokens)
            report.reply_tokens += [len(turn.response_ids) for traj in trajectories for turn in traj.turns]
        assert not problems, "; ".join(problems)
        tokens = report.reply_tokens
        report.notes.append(f"expert replies: {len(tokens)} calls over {len(seeds)} episodes, {min(tokens)}-"
                            f"{max(tokens)} tokens each (mean {sum(tokens) / len(tokens):.1f}, end-of-turn "
                            f"included); per-call cap {state['cap']} (max_tokens_per_step, else "
                            "generating_args.max_new_tokens)")

    def determinism() -> None:
        _needs_expert(state)
        if "episodes" not in state:
            raise _Skip("no episode was played")
        again = play(seeds=seeds[:1])[0]
        first = state["episodes"][0]
        assert _fingerprint(again) == _fingerprint(first), (
            f"seed {seeds[0]} played twice gave different episodes (rewards {[t.episode_reward for t in first]} "
            f"vs {[t.episode_reward for t in again]}): draw every random choice from task.seed")

    def refusal() -> None:
        _needs_expert(state)
        trajectories = play(seeds=seeds[:1], max_steps=1)[0]
        if any(t.metrics.get("uncaught_refusal") for t in trajectories):
            report.notes.append("with max_steps=1 the agent let the refused call's openai.BadRequestError "
                                "propagate: such an episode scores 0 (truncated), its own reward lost; catch it "
                                "(code max_steps_exceeded / context_length_exceeded) and return the reward")

    checks: list[tuple[str, Callable[[], Any]]] = [("registration and config", resolved)]
    info = manager.get_plugin(reg.plugin) if manager is not None else None
    if info is not None:
        checks.append(("entry module stays import-light", lambda: check_import_light(info.module)))
    checks += [("has an expert", expert), ("episodes with its expert", episodes), ("seed determinism", determinism),
               ("max_steps=1 ends as a trajectory", refusal)]
    report.run(checks)
    if report.failures and raise_on_failure:
        raise AgentCheckError(str(report))
    return report


def _needs_expert(state: dict[str, Any]) -> None:
    if "run" not in state or state.get("no_expert"):
        raise _Skip("no expert to play it" if state.get("no_expert") else "the config did not resolve")


def _episode_problems(seed: int, trajectories: list[Any], max_tokens: int | None) -> list[str]:
    problems = []
    for traj in trajectories:
        where = f"seed {seed} ({traj.traj_id})"
        if not math.isfinite(traj.episode_reward):
            problems.append(f"{where}: reward {traj.episode_reward}")
        if traj.metrics.get("malformed_tool_calls"):
            problems.append(f"{where}: {traj.metrics['malformed_tool_calls']:g} expert replies wrote tool calls that "
                            "do not parse (write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> with "
                            "the name of an offered tool and an object of arguments)")
        if traj.template_mismatches:
            problems.append(f"{where}: {traj.template_mismatches} replies do not re-render as generated (the chat "
                            "template writes the reply differently when the agent sends it back)")
        for k, turn in enumerate(traj.turns):
            if turn.finish_reason == "length" and traj.end_reason != "sequence_length":
                problems.append(f"{where}: call {k}'s expert reply was cut at {len(turn.response_ids)} tokens")
    return problems


def _fingerprint(trajectories: list[Any]) -> list[tuple]:
    return [(t.episode_reward, t.end_reason, [tuple(turn.response_ids) for turn in t.turns]) for t in trajectories]
