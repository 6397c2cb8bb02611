"""Every hook a roll plugin can implement.

roll is extended through register-style hooks: roll calls each implementation once, handing it a
``register`` callback, and the implementation announces what it provides by calling ``register``
any number of times. Registration is lazy: a plugin names its component as a ``"module:attr"``
string and roll imports it only when a config selects it, so importing a plugin's entry module
must stay cheap (never import torch, ray or vllm at module level there).

Every ``register`` callback has the same signature::

    register(name, target, *, tags=(), description="", requires=(), **options)

``name``
    The unique name a config selects the component by (``env_type: sokoban``,
    ``adv_estimator: grpo``, ``strategy_name: hf_train`` ...). Two plugins registering one name
    of one kind is an error that names both distributions.
``target``
    ``"package.module:Attribute"``, imported on first use.
``tags``
    Extra names the component can be found by (``registry.find_by_tag``); envs use them for
    ROLL's familiar env tags (``FrozenLake``, ``SimpleSokoban``).
``description``
    One line shown by ``roll plugins list``; the target's docstring is shown by ``roll plugins show``.
``requires``
    pip requirement strings the component needs at import time; when the import fails, roll's
    error tells the user to ``pip install`` exactly these.
``options``
    Kind-specific metadata, documented on each hook below. They are checked when registered
    (``roll_core.registry.KIND_OPTIONS``): an unknown, missing or malformed option fails the plugin
    with a message naming it, so a misspelt option never silently does nothing.

A plugin fails alone, listed by ``roll plugins list`` with its error, when importing it raises
anything (``SystemExit`` included), when it marks a function ``@hookimpl`` that is not a hook
below (a misspelt hook name), or when a registration is malformed. Two plugins registering one
name of one kind both stay installed; selecting that name is an error naming both.

Mark implementations with ``from roll_core import hookimpl``. Core's own components are registered through these very hooks (see ``roll_core.builtin``), so a
third-party plugin is a first-class citizen: it can do anything the built-ins do.
"""

from __future__ import annotations

import pluggy

PROJECT_NAME = "roll"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def roll_register_envs(register):
    """Register text environments.

    Called once per process when the registry is first built (the CLI, the pipeline driver and
    every Ray worker build their own). ``target`` names a subclass of
    :class:`roll_core.envs.TextEnv`. Options:

    ``defaults``
        a mapping of ``env_config`` values applied first whenever this registration is used;
        a config's ``env_config`` overrides them. This is how one env class offers several
        presets (ROLL's ``SimpleSokoban`` and ``LargerSokoban`` are two registrations of one class).
    ``requirements``
        pip requirement strings (``["gym-sokoban==0.0.6", "numpy<2"]``) for the env's *own* Python
        environment: its env-manager workers run in a virtual environment that roll builds once
        (cached under ``~/.cache/roll/env-python``, or ``$ROLL_ENV_PYTHON_CACHE``) and starts them
        in through Ray's runtime environment (``py_executable``), while the trainer keeps its
        own. The requirements are installed on top of the trainer's packages and win over them,
        so an env may pin versions that clash with the trainer's. Import those libraries inside
        the env's methods, not at module level: the driver imports the env class (in the
        trainer's environment) to validate ``env_config``. See :mod:`roll_core.distributed.env_python`.
    ``python``
        the Python versions the env supports (``"3.11"``, ``">=3.10,<3.13"``), checked when a
        config selects it. Ray runs every worker of a cluster on the driver's Python version, so
        a mismatch is an error that names the version to start roll with.

    Example::

        @hookimpl
        def roll_register_envs(register):
            register("maze", "roll_env_maze.env:MazeEnv", tags=["Maze"],
                     description="Find the exit of a random maze")
    """


@hookspec
def roll_register_advantage_estimators(register):
    """Register advantage estimators, selected by ``adv_estimator`` in the config.

    ``target`` names a callable ``estimator(data, config) -> dict`` working on pure tensors (see
    :mod:`roll_core.algorithms.advantages` for the contract: ``data`` holds the label-aligned
    ``token_level_rewards`` and ``mask``, critic ``values`` and the grouping keys; the estimator
    returns ``advantages`` and ``returns`` ``[B, L-1]`` plus optional float metrics).
    Options:

    ``needs_critic``
        ``True`` when the estimator reads critic values (``gae``); the pipeline then builds a critic.
    ``granularity``
        ``"trajectory"`` (one sample per episode, the default) or ``"step"`` (one sample per turn,
        as GiGPO needs); the rollout engine builds samples accordingly.
    """


@hookspec
def roll_register_policy_losses(register):
    """Register policy-gradient losses, selected by ``actor_train.pg_variant``.

    ``target`` names a callable
    ``loss(log_probs, old_log_probs, advantages, config, *, ratio=None, scores=None, **kw) -> [B, T]``
    returning the per-token loss (see :mod:`roll_core.algorithms.losses`); roll aggregates it with
    ``loss_agg_mode`` over the global batch, so a new loss never has to handle micro-batching.
    """


@hookspec
def roll_register_strategies(register):
    """Register training and inference backends, selected by ``strategy_args.strategy_name``.

    ``target`` names a subclass of the contract of its ``role`` in :mod:`roll_core.strategies.base`
    (``TrainStrategy`` or ``InferStrategy``), built by the pipeline with its ``from_worker_config``;
    :func:`roll_core.testing.check_strategy` checks a plugin against it. Options:

    ``role``
        ``"train"`` or ``"infer"`` (required): a train strategy computes log-probs, trains and
        exports weights; an infer strategy generates and loads exported weights.
    ``needs_gpu``
        ``True`` when the backend cannot run on a CPU-only machine; its tests skip there.
    ``critic``
        for train strategies, ``"module:Class"`` of the value-model strategy the pipeline builds
        for ``critic`` when the estimator needs one (``gae``).
    ``serves_lora``
        for infer strategies, ``True`` when the engine serves LoRA adapters natively: a run that
        trains LoRA then syncs the adapter (``load_adapter``) instead of merged weights, and builds
        the strategy with ``max_lora_rank=`` the adapter's rank.
    """


@hookspec
def roll_register_rewards(register):
    """Register RLVR reward functions, chosen per data ``domain`` in the config.

    ``target`` names a callable ``reward(prompt, response, reference, **kwargs) -> float``
    (see :mod:`roll_core.rewards`), or a class built once per process with
    ``from_reward_config(section, *, seed, **services)`` whose instances are that callable
    (:mod:`roll_core.rewards.dispatch`); a score > 0 counts as correct. No options;
    :func:`roll_core.testing.check_reward` checks a reward against the contract.
    """


@hookspec
def roll_register_agents(register):
    """Register agent code that talks to the policy through the OpenAI chat API.

    An agent is selected like an env: ``custom_envs.<tag>.env_type`` (or a tag in an env manager's
    ``tags``) names it, and ``env_config`` is validated by its config model. Each episode, roll
    starts an OpenAI-compatible gateway session backed by the run's generation scheduler and calls
    the agent with a task and a client already pointed at it; every completion is recorded token
    by token (never re-tokenised) and becomes training rows (see :mod:`roll_core.rollout.agents.agent`).

    ``target`` names either an async (or plain) function ``agent(task, client) -> result`` or a
    class built once per env slot as ``cls(config)`` whose ``run(task, client)`` plays an
    episode. ``task`` carries ``seed``, ``config`` (the validated ``env_config``), ``model``,
    ``max_steps``, ``max_tokens``, ``mode`` and the group/episode ids; ``client`` is an
    ``openai.AsyncOpenAI`` (an ``openai.OpenAI`` for plain functions, run in a thread). The result
    is the episode reward (a number), ``(reward, metrics)``, or a mapping with ``reward``,
    ``metrics``, ``step_rewards`` (one per call, for step-wise estimators), ``truncated`` and
    ``reference``; ``None`` lets the tag's ``reward`` function score the final conversation.
    ``metrics["success"]`` defaults to whether the reward is positive.
    Options:

    ``config_model``
        ``"module:Model"``, a pydantic model validating ``env_config`` (default: the target's
        ``config_model`` attribute; without one ``env_config`` is passed as a plain dict).
    ``expert``
        ``"module:function"`` ``expert(task, messages, tools) -> str``, the reply a demonstrator
        would write (a class may define an ``expert`` method instead). It answers the calls of the
        ``scripted`` rollout policy, which ``warmup_sft`` uses for demonstrations. It returns the
        raw text to generate (a tool call in the chat template's format, e.g.
        ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), receives tool-call arguments
        as dicts, and its replies must fit ``max_tokens_per_step`` whole.

    The full contract (refused calls, how calls become rows) is in docs/authoring.md, "Agents";
    ``roll plugins new agent NAME`` writes a package to start from, and
    :func:`roll_core.testing.check_agent` checks one.

    Example::

        @hookimpl
        def roll_register_agents(register):
            register("guesser", "my_agents.guess:play", tags=["Guess"],
                     description="Guess a number with a hint tool")
    """


@hookspec
def roll_register_group_filters(register):
    """Register group filters, selected by ``train_env_manager.group_filter_cls`` (agentic training).

    ``target`` names a class; roll builds one instance per env-manager worker (``cls()``) and calls
    ``instance.filter(group_id, episode_id, group)`` when all members of a group have finished an
    episode, with ``group`` the members' :class:`roll_core.chat.trajectory.Trajectory` objects
    (``episode_reward``, ``metrics``, ``turns``). As in ROLL, a true result drops the group; a
    string drops it and names the reason (counted as ``rollout/filtered_groups/<reason>``; ``True``
    counts under the filter's registered name; ``refilled`` is taken). A dropped group is replaced:
    the queue admits a fresh group-episode (a new seed) in its place, at most ``max_groups_per_step``
    groups per step (see :mod:`roll_core.rollout.engine.group_filters`); it reaches the trainer only
    when that bound leaves a batch unfilled and ``unfilled_batch: fill`` completes the batch with the
    latest dropped groups. Validation is never filtered.

    Example::

        @hookimpl
        def roll_register_group_filters(register):
            register("all_failed", "my_plugin.filters:AllFailed",
                     description="Drop groups in which no episode succeeded")
    """
