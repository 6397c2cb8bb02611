"""One env playing one episode: reset -> prompt -> generate -> parse -> step -> ... -> trajectory.

:func:`play_episode` is the per-env loop body of the env manager. It never waits for another env;
it awaits only its own generation and its own env calls. Env calls run in a pool thread with a
timeout when ``step_timeout_s`` is set (:mod:`roll_core.rollout.engine.env_threads`), so a hung ``step``
costs only its own trajectory and never a thread of the pool; envs whose calls only compute
(``TextEnv.inline_calls``) are called on the event loop, which is cheaper than the thread hop. Failures are raised as
:class:`EpisodeFailure` with a reason the metrics count by; every env call and generation that
completes advances :attr:`EpisodeContext.progress` (what the stall bound watches).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from roll_core.chat.codec import ChatCodec
from roll_core.chat.trajectory import Trajectory, Turn, make_prompt_builder
from roll_core.envs.prompt import Conversation, format_example
from roll_core.errors import InferenceLost
from roll_core.rollout.engine.env_threads import EnvCallTimeout, EnvThreads
from roll_core.rollout.engine.messages import Ticket
from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec, derive_seed
from roll_core.rollout.engine.turn_policies import TurnPolicy
from roll_core.strategies.base import GenerationRequest, SamplingParams

METRIC_KEYS = ("success", "action_is_valid", "action_is_effective")


class EpisodeFailure(Exception):
    """The episode cannot finish; ``reason`` is a metric suffix (env_error, timeout, ...)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class EpisodeCancelled(Exception):
    """The group no longer needs this episode (complete without it, or given up)."""


class EpisodeStale(Exception):
    """The episode already holds a turn too old for any future batch (async training): stop it."""


@dataclass
class EpisodeContext:
    """What every episode of one env manager shares."""

    spec: RolloutSpec
    codec: ChatCodec
    threads: EnvThreads | None  # None: env calls run inline (no step timeout)
    format_penalty: float = 0.0  # env-manager level penalty for invalid actions (ROLL's)
    progress: int = 0  # env calls and generations completed (the stall bound watches it)

    async def call_env(self, env: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """``env.<name>(*args)``, in a pool thread under the step timeout when one is set, inline
        when the env says its calls never block (``inline_calls``)."""
        timeout = self.spec.step_timeout_s
        fn = getattr(env, name)
        try:
            if not timeout or self.threads is None or getattr(env, "inline_calls", False):
                result = fn(*args, **kwargs)
            else:
                result = await self.threads.call(functools.partial(fn, *args, **kwargs), timeout)
        except EnvCallTimeout:
            raise EpisodeFailure("timeout", f"env.{name} took longer than {timeout:g} s (env_step_timeout_s); "
                                 "the call was abandoned and the env replaced") from None
        except EpisodeFailure:
            raise
        except Exception as exc:
            raise EpisodeFailure("env_error", f"env.{name} raised {type(exc).__name__}: {exc}") from exc
        self.progress += 1
        return result


def new_conversation(env: Any, env_spec: EnvSpec, reset_info: dict) -> Conversation:
    """The episode's conversation: the env's instruction (or the config's templates around it)."""
    return Conversation(reset_info.get("instruction") or env.instruction, format_example=format_example(env),
                        max_tokens=env_spec.max_tokens_per_step, system_template=env_spec.system_template,
                        turn_template=env_spec.turn_template)


def checked_reset(result: Any) -> tuple[str, dict]:
    """``env.reset``'s ``(observation, info)``, or the env error a malformed result is."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EpisodeFailure("env_error", f"env.reset returned {_short(result)}, not (observation, info)")
    observation, info = result
    _check_observation("reset", observation)
    if not isinstance(info, dict):
        raise EpisodeFailure("env_error", f"env.reset returned info {_short(info)}, not a dict")
    return observation, info


def checked_step(result: Any) -> tuple[str, float, bool, bool, dict]:
    """``env.step``'s 5-tuple with a finite float reward, or the env error a malformed result is.

    A garbage result costs its trajectory like an exception would; it never reaches training
    (a NaN reward would poison every advantage of its batch).
    """
    if not (isinstance(result, tuple) and len(result) == 5):
        raise EpisodeFailure("env_error", f"env.step returned {_short(result)}, not (observation, reward, "
                                          "terminated, truncated, info)")
    observation, reward, terminated, truncated, info = result
    _check_observation("step", observation)
    try:
        reward = float(reward)
    except (TypeError, ValueError):
        raise EpisodeFailure("env_error", f"env.step returned the reward {_short(reward)}, not a number") from None
    if not math.isfinite(reward):
        raise EpisodeFailure("env_error", f"env.step returned the reward {reward}, not a finite number")
    if not isinstance(info, dict):
        raise EpisodeFailure("env_error", f"env.step returned info {_short(info)}, not a dict")
    return observation, reward, bool(terminated), bool(truncated), info


def _check_observation(call: str, observation: Any) -> None:
    if not isinstance(observation, str):
        raise EpisodeFailure("env_error", f"env.{call} returned the observation {_short(observation)}, not text")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def turn_sampling(spec: RolloutSpec, env_spec: EnvSpec) -> SamplingParams:
    """Sampling params of every turn: generating_args, with max_tokens_per_step as a tighter cap."""
    caps = [spec.sampling.max_new_tokens, env_spec.max_tokens_per_step]
    return replace(spec.sampling, max_new_tokens=min(c for c in caps if c))


async def play_episode(ctx: EpisodeContext, env: Any, env_spec: EnvSpec, ticket: Ticket, member: int,
                       policy: TurnPolicy, *, route_key: str, cancelled: Callable[[], bool],
                       frames: list | None = None, wait_resumed: Callable[[], Any] | None = None,
                       stale: Callable[[int, int], bool] | None = None) -> Trajectory:
    """Play ``ticket``'s episode on ``env`` and return the finished trajectory.

    ``stale(first_turn_version, latest_version)`` is asked after every generation (async training):
    versions only grow, so once it says yes the episode can never be trained on and
    :class:`EpisodeStale` ends it before more env steps or generations are spent on it.
    """
    spec, codec = ctx.spec, ctx.codec
    observation, info = checked_reset(await ctx.call_env(env, "reset", seed=ticket.seed))
    sampling = turn_sampling(spec, env_spec)
    conversation = new_conversation(env, env_spec, info)
    builder = make_prompt_builder(codec, spec.granularity, env_spec.history_window)
    max_turns = env_spec.max_steps or env.config.max_steps
    if frames is not None:
        frames.append(_frame(env))
    turns: list[Turn] = []
    mismatches = 0
    last_reward: float | None = None
    terminated = truncated = False
    end_reason = "max_steps"
    traj_id = f"{spec.mode}-p{ticket.pass_id}-g{ticket.group_id}-e{ticket.episode_id}-m{member}"
    for turn_index in range(max_turns):
        if cancelled():
            raise EpisodeCancelled()
        if wait_resumed is not None:
            await wait_resumed()
        conversation.observe(observation, actions_left=max_turns - turn_index, last_reward=last_reward)
        piece = builder.prompt(conversation.messages)
        budget = spec.sequence_length - builder.length_with(piece)
        if budget < 1:  # no room for even one response token: end cleanly before this turn
            conversation.messages.pop()
            truncated, end_reason = True, "sequence_length"
            break
        prompt_ids = builder.request_ids(piece)  # the stream so far plus this turn's prompt
        builder.commit(piece)
        mismatches += piece.template_mismatch
        request = GenerationRequest(
            request_id=f"{traj_id}-t{turn_index}",
            prompt_ids=prompt_ids,
            # a per-request seed makes the sampled tokens independent of how requests happen to be
            # batched (timing), so a sync-mode run is reproducible and resumes exactly
            sampling=replace(sampling, max_new_tokens=min(sampling.max_new_tokens, budget),
                             seed=sampling.seed if sampling.seed is not None else derive_seed(
                                 spec.seed, f"{spec.mode}/sample", ticket.group_id, ticket.episode_id,
                                 member, turn_index)),
            route_key=route_key,
        )
        try:
            output = await policy.generate(request, env, observation, ticket.version)
        except InferenceLost:  # no inference worker left: not this env's fault, the run stops
            raise
        except Exception as exc:
            raise EpisodeFailure("generation_error", f"generation failed: {type(exc).__name__}: {exc}") from exc
        if output.finish_reason == "abort":
            raise EpisodeFailure("generation_aborted", "generation was aborted")
        ctx.progress += 1
        version = int(output.policy_version)  # the turn start: its first (oldest) token's version
        latest = max(output.versions(), default=version)
        if stale is not None and stale(turns[0].version if turns else version, latest):
            raise EpisodeStale(f"turn {turn_index} is on policy version {latest}, the episode began on "
                               f"{turns[0].version if turns else version}")
        response_ids = list(output.token_ids)
        full_text, response_text = codec.response_texts(response_ids)
        builder.add_response(response_ids, full_text)
        conversation.respond(response_text)
        next_observation, reward, term, trunc, step_info = checked_step(await ctx.call_env(env, "step", response_text))
        metrics = {k: float(v) for k, v in (step_info.get("metrics") or {}).items()}
        if ctx.format_penalty and not metrics.get("action_is_valid", 1.0):
            reward += ctx.format_penalty
        turns.append(Turn(
            prompt_ids=piece.ids, response_ids=response_ids, logprobs=list(output.logprobs),
            version=version, finish_reason=output.finish_reason, observation=observation,
            prompt_text=piece.text, response_text=response_text, reward=float(reward), metrics=metrics,
            token_versions=None if output.token_versions is None else list(output.token_versions),
            trainable=output.trainable,
        ))
        if frames is not None:
            frames.append(_frame(env))
        observation, last_reward = next_observation, float(reward)
        if term or trunc:
            terminated, truncated = bool(term), bool(trunc) and not term
            end_reason = "terminated" if term else "max_steps"
            break
    else:
        truncated = True
    if not turns:
        raise EpisodeFailure("empty_episode", "the first prompt alone exceeds sequence_length")
    return Trajectory(
        traj_id=traj_id,
        traj_group_id=f"{spec.mode}-p{ticket.pass_id}-g{ticket.group_id}-e{ticket.episode_id}",
        group_id=ticket.group_id,
        episode_id=ticket.episode_id,
        member=member,
        tag=env_spec.tag,
        seed=ticket.seed,
        mode=spec.mode,
        turns=turns,
        incremental=builder.incremental,
        terminated=terminated,
        truncated=truncated,
        end_reason=end_reason,
        episode_reward=sum(t.reward for t in turns),
        metrics=episode_metrics(turns),
        messages=conversation.messages,
        template_mismatches=mismatches,
    )


def episode_metrics(turns: list[Turn]) -> dict[str, float]:
    """ROLL's per-trajectory env metrics: success at the end, validity/effectiveness per step."""
    n = max(len(turns), 1)
    return {
        "success": float(turns[-1].metrics.get("success", 0.0)) if turns else 0.0,
        "action_is_valid": sum(t.metrics.get("action_is_valid", 0.0) for t in turns) / n,
        "action_is_effective": sum(t.metrics.get("action_is_effective", 0.0) for t in turns) / n,
        "num_steps": float(len(turns)),
    }


def _frame(env: Any) -> Any:
    try:
        return env.render("rgb_array")
    except Exception:  # an env without rgb rendering still plays; it just has no GIF
        return None
