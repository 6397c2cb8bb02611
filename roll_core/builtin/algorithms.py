"""Built-in algorithms of roll-core, registered through the public hooks like any plugin.

Only names and ``"module:attr"`` strings live here: this module must stay importable without
torch (``roll plugins list`` loads it); the numerics in :mod:`roll_core.algorithms` are imported
when a config selects one of them.
"""

from roll_core.hookspecs import hookimpl

_ESTIMATORS = "roll_core.algorithms.advantages"
_LOSSES = "roll_core.algorithms.losses"

#: name -> (description, options)
ADVANTAGE_ESTIMATORS: dict[str, tuple[str, dict]] = {
    "gae": (
        "Generalised advantage estimation with a critic (values masked before bootstrapping)",
        {"needs_critic": True, "granularity": "trajectory"},
    ),
    "reinforce": (
        "Discounted reward-to-go; REINFORCE++ with batch mean/std normalisation",
        {"needs_critic": False, "granularity": "trajectory"},
    ),
    "grpo": (
        "Group-normalised rewards (group mean and std in RLVR), then reward-to-go",
        {"needs_critic": False, "granularity": "trajectory"},
    ),
    "agentic_reinforce": (
        "Trajectory-wise REINFORCE discounted per turn (StarPO)",
        {"needs_critic": False, "granularity": "trajectory"},
    ),
    "step_reinforce": (
        "Step-wise REINFORCE on normalised discounted step returns",
        {"needs_critic": False, "granularity": "step"},
    ),
    "gigpo": (
        "GiGPO: episode-level plus anchor-state step-level group advantages",
        {"needs_critic": False, "granularity": "step"},
    ),
}

#: name -> description
POLICY_LOSSES: dict[str, str] = {
    "ppo": "PPO clipped surrogate, asymmetric clip range and optional dual clip",
    "vanilla": "REINFORCE policy gradient -A log pi, no ratio",
    "tis": "Truncated importance sampling, ratio clipped to [tis_lower_bound, tis_upper_bound]",
    "topr": "TOPR: plain PG on positive scores, truncated IS on the rest",
    "cispo": "CISPO: clipped, detached IS weight on -A log pi (optional unified mask)",
    "kimi15": "Kimi 1.5: -A log pi plus a squared log-ratio penalty",
}


@hookimpl
def roll_register_advantage_estimators(register):
    for name, (description, options) in ADVANTAGE_ESTIMATORS.items():
        register(name, f"{_ESTIMATORS}:{name}", description=description, **options)


@hookimpl
def roll_register_policy_losses(register):
    for name, description in POLICY_LOSSES.items():
        register(name, f"{_LOSSES}:{name}", description=description)
