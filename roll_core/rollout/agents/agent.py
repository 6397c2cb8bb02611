"""Agent code as an env: episodes played by OpenAI-API code, recorded by the gateway, trained on.

A tag whose ``env_type`` names a registered agent (hook ``roll_register_agents``) is played by
that agent instead of a text env, in the same env managers, groups, seeds, validation passes,
pauses and fault handling. Per episode the :class:`AgentRuntime` of the env-manager worker

1. opens a gateway session (:mod:`roll_core.gateway`) backed by the run's generation scheduler
   (or, for the ``scripted`` policy, by the agent's expert), with the episode's sampling seeds;
2. calls the agent with an :class:`AgentTask` and an OpenAI client pointed at the session;
3. watches it: the group no longer needing the episode cancels it, a policy version too old for
   async training stops it (``stale``), agent code silent for longer than ``step_timeout_s``
   between calls fails it (``timeout``), an exception fails it (``agent_error``); failures are
   retried and counted like env failures;
4. turns the recorded calls into trajectories (:func:`roll_core.gateway.merge.merge_calls`): one
   when every call extends the previous one token for token, several sharing the episode reward
   when the agent rewrote its history.

The episode reward is what the agent returns, or the tag's ``reward`` function applied to the final
conversation. Agent code needs nothing from roll: ``task`` and ``client`` are all it gets.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from roll_core.chat.codec import ChatCodec
from roll_core.chat.trajectory import Trajectory, Turn
from roll_core.errors import ConfigError, InferenceLost, PluginError
from roll_core.gateway.merge import merge_calls
from roll_core.gateway.session import Session, SessionSettings
from roll_core.rollout.engine.episode import EpisodeCancelled, EpisodeFailure, EpisodeStale, turn_sampling
from roll_core.rollout.engine.messages import Ticket
from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec, derive_seed
from roll_core.rollout.engine.turn_policies import policy_needs_model
from roll_core.strategies.base import GenerationOutput, GenerationRequest

logger = logging.getLogger("roll.rollout")

#: how often a running agent is checked for cancellation and its timeout (failures the gateway sees
#: wake the watcher at once); each check costs every running episode a wake-up
WATCH_INTERVAL_S = 1.0
#: threads for agents written as plain (synchronous) functions, per env-manager worker
MAX_AGENT_THREADS = 32
#: a session's counts that every agent trajectory reports as metrics (``env/<tag>/<name>``)
EPISODE_COUNTS = ("tool_calls", "malformed_tool_calls", "refused", "undelivered_calls", "concurrent_calls")


@dataclass(frozen=True)
class AgentTask:
    """What an agent gets for one episode (besides its OpenAI client)."""

    seed: int  # the episode's seed: every member of a group gets the same one
    config: Any  # the validated env_config (the agent's config model, or a dict)
    model: str  # the model name to send in requests
    tag: str
    mode: str  # "train" or "val"
    group_id: int
    episode_id: int
    member: int
    max_steps: int | None = None  # model calls allowed (custom_envs max_steps); more are refused
    max_tokens: int | None = None  # cap on each call's completion tokens (max_tokens_per_step)


@dataclass
class AgentResult:
    """An episode's outcome; agents may return this, a number, ``(reward, metrics)`` or a mapping."""

    reward: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    step_rewards: list[float] | None = None  # one per model call (step-wise estimators, GiGPO)
    truncated: bool = False  # the episode ran out of turns rather than ending
    reference: str | None = None  # for the tag's reward function

    @classmethod
    def of(cls, value: Any) -> AgentResult:
        """Read what an agent returned (raises TypeError / ValueError on anything else)."""
        if isinstance(value, AgentResult):
            return value
        if value is None:
            return cls()
        if isinstance(value, bool | int | float):
            return cls(reward=float(value))
        if isinstance(value, tuple) and len(value) == 2:
            return cls(reward=None if value[0] is None else float(value[0]), metrics=_metrics(value[1]))
        if isinstance(value, Mapping):
            unknown = set(value) - {"reward", "metrics", "step_rewards", "truncated", "reference"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)} (expected reward, metrics, step_rewards, "
                                 "truncated, reference)")
            steps = value.get("step_rewards")
            return cls(reward=None if value.get("reward") is None else float(value["reward"]),
                       metrics=_metrics(value.get("metrics") or {}),
                       step_rewards=None if steps is None else [float(r) for r in steps],
                       truncated=bool(value.get("truncated", False)),
                       reference=None if value.get("reference") is None else str(value["reference"]))
        raise TypeError(f"an agent returns a reward, (reward, metrics), a mapping or AgentResult; got "
                        f"{type(value).__name__}")


def _metrics(values: Any) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise TypeError(f"metrics must be a mapping of names to numbers, got {type(values).__name__}")
    return {str(k): float(v) for k, v in values.items()}


class Agent:
    """A loaded agent: its entry point (async, or plain in a thread), its expert, its reward."""

    def __init__(self, name: str, run: Callable[..., Any], expert: Callable[..., Any] | None,
                 reward: Callable[..., Any] | None):
        self.name = name
        self.run = run
        self.is_async = inspect.iscoroutinefunction(run)
        self.expert_fn = expert
        self.reward_fn = reward

    @classmethod
    def load(cls, binding: Any) -> Agent:
        """The agent of an :class:`~roll_core.run.AgentBinding` (a class is built with its config)."""
        reg = binding.registration
        target = reg.load()
        expert = None
        if inspect.isclass(target):
            instance = target(binding.config)
            run = getattr(instance, "run", None)
            if not callable(run):
                raise PluginError(f"The agent {reg.name!r} from plugin {reg.plugin!r} is the class {reg.target!r}, "
                                  "which has no run(task, client) method. This is a bug in that plugin.")
            expert = getattr(instance, "expert", None)
        elif callable(target):
            run = target
        else:
            raise PluginError(f"The agent {reg.name!r} from plugin {reg.plugin!r} points at {reg.target!r}, which "
                              "is neither a function nor a class. This is a bug in that plugin.")
        option = reg.options.get("expert")
        if option is not None:
            from roll_core.registry import Registration

            expert = Registration(reg.kind, reg.name, str(option), reg.plugin, reg.distribution).load()
        reward = binding.reward.load() if binding.reward is not None else None
        return cls(reg.name, run, expert, reward)

    async def play(self, task: AgentTask, client: Any, executor: Executor) -> Any:
        if self.is_async:
            return await self.run(task, client)
        return await asyncio.get_running_loop().run_in_executor(executor, self.run, task, client)

    def score(self, messages: list[dict[str, Any]], reference: str | None) -> float | None:
        """The tag's reward function on the final conversation (first user message, last reply)."""
        if self.reward_fn is None:
            return None
        prompt = next((m.get("content") or "" for m in messages if m["role"] == "user"), "")
        response = next((m.get("content") or "" for m in reversed(messages) if m["role"] == "assistant"), "")
        return float(self.reward_fn(prompt, response, reference))


class ModelBackend:
    """Calls answered by the policy: the run's generation scheduler (a Ray actor)."""

    def __init__(self, scheduler: Any):
        self.scheduler = scheduler

    async def generate(self, request: GenerationRequest, messages, tools) -> GenerationOutput:
        return await self.scheduler.generate.remote(request)


class ExpertReplyTooLong(ConfigError):
    """The expert wrote a reply longer than a call may be: every demonstration would be cut off."""

    gateway_code = "expert_reply_too_long"


class ExpertBackend:
    """Calls answered by the agent's expert (the ``scripted`` policy of agent tags): its reply text,
    tokenised and closed with the end-of-turn token like a model reply that stopped by itself.

    A reply longer than ``cap`` (the tag's per-call cap: ``max_tokens_per_step`` or
    ``generating_args.max_new_tokens``) is a configuration error, not a demonstration: cut there it
    would teach the model a broken reply (a tool call without its end). Cut by the room left under
    ``sequence_length`` instead, it ends like a model reply that ran out of context.
    """

    def __init__(self, agent: Agent, task: AgentTask, codec: ChatCodec, version: int, cap: int | None = None):
        if agent.expert_fn is None:
            raise EpisodeFailure("agent_error", f"the agent {agent.name!r} has no expert, so the scripted policy "
                                                "cannot play it (define expert(task, messages, tools) -> str)")
        self.agent, self.task, self.codec, self.version, self.cap = agent, task, codec, version, cap

    async def generate(self, request: GenerationRequest, messages, tools) -> GenerationOutput:
        text = self.agent.expert_fn(self.task, messages, tools)
        if inspect.isawaitable(text):
            text = await text
        ids = self.codec.encode(str(text)) + self.codec.end_of_turn_ids
        if self.cap is not None and len(ids) > self.cap:
            raise ExpertReplyTooLong(
                f"the expert of agent {self.agent.name!r} (tag {self.task.tag!r}) wrote a reply of {len(ids)} tokens "
                f"(end-of-turn included), but a call may generate at most {self.cap} "
                f"(custom_envs.{self.task.tag}.max_tokens_per_step, or actor_infer.generating_args.max_new_tokens): "
                f"cut there, every such demonstration would be a broken reply. Raise the cap to at least "
                f"{len(ids)}, or shorten the expert's replies. The reply began: {str(text)[:80]!r}")
        limit = request.sampling.max_new_tokens
        finish = "stop"
        if len(ids) > limit:
            ids, finish = ids[:limit], "length"
        return GenerationOutput(request_id=request.request_id, token_ids=ids, logprobs=[0.0] * len(ids),
                                finish_reason=finish, policy_version=self.version)


class AgentRuntime:
    """The gateway of one env-manager worker and the episodes its agent tags play through it."""

    def __init__(self, spec: RolloutSpec, codec: ChatCodec, generate_scheduler: Any = None, *,
                 worker_index: int = 0, wait_resumed: Callable[[], Any] | None = None):
        from roll_core.gateway.server import Gateway

        self.spec = spec
        self.codec = codec
        self.generate_scheduler = generate_scheduler
        self.wait_resumed = wait_resumed
        self.gateway = Gateway(spec.gateway, codec, port_offset=worker_index)
        self.executor = ThreadPoolExecutor(max_workers=MAX_AGENT_THREADS, thread_name_prefix="roll-agent")
        self._clients: dict[bool, Any] = {}  # async? -> the OpenAI client every session's client copies

    async def start(self) -> None:
        await self.gateway.start()

    async def stop(self) -> None:
        await self.gateway.stop()
        for client in self._clients.values():
            await _close(client)
        self.executor.shutdown(wait=False, cancel_futures=True)

    def client(self, agent: Agent, session: Session) -> Any:
        """An OpenAI client pointed at ``session`` (async for async agents). Sessions share one
        connection pool (building an OpenAI client costs tens of milliseconds); no retries: a retried
        call would be a second sample."""
        import openai

        base = self._clients.get(agent.is_async)
        if base is None:
            cls = openai.AsyncOpenAI if agent.is_async else openai.OpenAI
            base = self._clients[agent.is_async] = cls(base_url=self.gateway.base_url, api_key=self.gateway.spec.api_key,
                                                       max_retries=0, timeout=None)
        return base.with_options(base_url=self.gateway.url(session))

    def task(self, env_spec: EnvSpec, ticket: Ticket, member: int) -> AgentTask:
        return AgentTask(seed=ticket.seed, config=env_spec.env.config, model=self.gateway.model, tag=env_spec.tag,
                         mode=self.spec.mode, group_id=ticket.group_id, episode_id=ticket.episode_id, member=member,
                         max_steps=env_spec.max_steps, max_tokens=env_spec.max_tokens_per_step)

    async def play(self, agent: Agent, env_spec: EnvSpec, ticket: Ticket, member: int, *, route_key: str | None,
                   cancelled: Callable[[], bool] = lambda: False,
                   stale: Callable[[int, int], bool] | None = None) -> list[Trajectory]:
        """Play ``ticket``'s episode with ``agent``; the trajectories of its calls (see the module doc)."""
        await self.start()
        spec = self.spec
        traj_id = f"{spec.mode}-p{ticket.pass_id}-g{ticket.group_id}-e{ticket.episode_id}-m{member}"

        def seed(number: int, choice: int) -> int:  # the env path's per-turn seeds, so both sample alike
            keys = (ticket.group_id, ticket.episode_id, member, number, *([choice] if choice else []))
            return derive_seed(spec.seed, f"{spec.mode}/sample", *keys)

        settings = SessionSettings(
            sequence_length=spec.sequence_length, sampling=turn_sampling(spec, env_spec), seed=seed,
            route_key=route_key, request_prefix=traj_id, greedy_only=spec.mode == "val",
            max_new_tokens_cap=env_spec.max_tokens_per_step, max_calls=env_spec.max_steps,
            wait_resumed=self.wait_resumed, cancelled=cancelled, stale=stale)
        task = self.task(env_spec, ticket, member)
        backend = (ModelBackend(self.generate_scheduler) if policy_needs_model(spec.policy)
                   else ExpertBackend(agent, task, self.codec, ticket.version, cap=settings.sampling.max_new_tokens))
        session = self.gateway.open_session(backend, settings, label=traj_id)
        try:
            result = await self._run(agent, task, session, cancelled)
        finally:
            self.gateway.close_session(session)
        return self.trajectories(session, result, agent, env_spec, ticket, member, traj_id)

    async def _run(self, agent: Agent, task: AgentTask, session: Session, cancelled: Callable[[], bool]
                   ) -> AgentResult:
        runner = asyncio.ensure_future(agent.play(task, self.client(agent, session), self.executor))
        changed = asyncio.ensure_future(session.changed.wait())  # a failure the gateway saw (stale, errors)
        timeout = self.spec.step_timeout_s
        try:
            while not runner.done():
                await asyncio.wait({runner, changed}, timeout=WATCH_INTERVAL_S,
                                   return_when=asyncio.FIRST_COMPLETED)
                if runner.done() or session.failure is not None:
                    break
                if cancelled():
                    session.fail("cancelled")
                elif timeout and session.idle_s() > timeout:
                    session.fail("timeout")
        finally:
            changed.cancel()
            if not runner.done():
                runner.cancel()
                await asyncio.gather(runner, return_exceptions=True)
        if runner.done() and not runner.cancelled():
            runner.exception()  # retrieved: the failure below says what happened
        failure = session.failure
        if failure == "cancelled" or cancelled():
            raise EpisodeCancelled()
        if failure == "stale":
            raise EpisodeStale(f"episode {session.id} reached a policy version too new for its first call")
        if failure == "timeout":
            raise EpisodeFailure("timeout", f"the agent {agent.name!r} spent more than {timeout} s in its own code "
                                            "between model calls (step_timeout_s)")
        if isinstance(session.error, ConfigError):  # no retry can succeed: the run stops with it
            raise session.error
        if failure == "inference_lost":  # not the agent's fault: the env manager stops the rollout
            raise InferenceLost(f"episode {session.id}: every actor_infer worker is gone")
        if failure is not None:
            raise EpisodeFailure(failure, f"episode {session.id}: {failure}")
        error = runner.exception()
        if error is not None:
            if session.end_reason is not None:  # it gave up on a refused call: a truncated episode
                return AgentResult(truncated=True, metrics={"uncaught_refusal": 1.0})
            raise EpisodeFailure("agent_error", f"the agent {agent.name!r} raised {type(error).__name__}: {error}"
                                 ) from error
        try:
            return AgentResult.of(runner.result())
        except (TypeError, ValueError) as exc:
            raise EpisodeFailure("agent_error", f"the agent {agent.name!r} returned something roll cannot read: "
                                                f"{exc}") from exc

    def trajectories(self, session: Session, result: AgentResult, agent: Agent, env_spec: EnvSpec, ticket: Ticket,
                     member: int, traj_id: str) -> list[Trajectory]:
        calls = session.calls
        if not calls:
            raise EpisodeFailure("empty_episode", f"the agent {agent.name!r} made no model call")
        last = calls[-1]
        conversation = [*last.messages, last.reply.message()]
        reward = result.reward
        if reward is None:
            reward = agent.score(conversation, result.reference)
        if reward is None:
            if session.end_reason is None:
                raise EpisodeFailure("agent_error", f"the agent {agent.name!r} returned no reward, and "
                                                    f"custom_envs.{env_spec.tag}.reward names no reward function")
            reward = 0.0
        # the model calls the agent received (a request whose reply was never delivered is no step)
        step_of = {number: k for k, number in enumerate(sorted({call.request for call in calls}))}
        requests = len(step_of)
        if result.step_rewards is not None and len(result.step_rewards) != requests:
            raise EpisodeFailure("agent_error", f"the agent {agent.name!r} returned {len(result.step_rewards)} "
                                                f"step_rewards for {requests} model calls")
        steps = result.step_rewards or [0.0] * (requests - 1) + [float(reward)]
        truncated = result.truncated or session.end_reason is not None
        end_reason = session.end_reason or ("max_steps" if result.truncated else "terminated")
        samples = merge_calls(calls)
        metrics = {**result.metrics, "calls": float(requests), "samples": float(len(samples)),
                   **{name: float(session.counts[name]) for name in EPISODE_COUNTS}}
        metrics.setdefault("success", float(reward > 0))  # unless the agent says: a positive reward
        out = []
        for k, sample in enumerate(samples):
            turns, before = [], ""
            for seg in sample.segments:
                call = seg.call
                text = call.prompt_text[len(before):] if call.prompt_text.startswith(before) else \
                    self.codec.decode(seg.prompt_ids)
                turns.append(Turn(prompt_ids=seg.prompt_ids, response_ids=list(call.completion_ids),
                                  logprobs=list(call.logprobs), version=call.version,
                                  finish_reason="length" if call.finish_reason == "length" else "stop",
                                  observation=call.observation, prompt_text=text,
                                  response_text=call.text, reward=float(steps[step_of[call.request]]),
                                  token_versions=call.token_versions))
                before = call.prompt_text + call.completion_text
            out.append(Trajectory(
                traj_id=traj_id if k == 0 else f"{traj_id}-s{k}",
                traj_group_id=f"{self.spec.mode}-p{ticket.pass_id}-g{ticket.group_id}-e{ticket.episode_id}",
                group_id=ticket.group_id, episode_id=ticket.episode_id, member=member, tag=env_spec.tag,
                seed=ticket.seed, mode=self.spec.mode, turns=turns, incremental=True,
                terminated=not truncated, truncated=truncated, end_reason=end_reason,
                episode_reward=float(reward), metrics={**metrics, "num_steps": float(len(turns))},
                messages=conversation, template_mismatches=sum(seg.call.template_mismatch for seg in sample.segments),
            ))
        return out


async def _close(client: Any) -> None:
    close = getattr(client, "close", None)
    if close is None:
        return
    try:
        result = close()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # closing a client must not cost the episode
        logger.debug("closing an agent client failed: %s", exc)
