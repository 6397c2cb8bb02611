"""``check_strategy``: does a backend plugin honour roll's strategy contract?

The counterpart of :func:`~roll_core.testing.check_env` for ``roll_register_strategies``
plugins (:mod:`roll_core.strategies.base`). Every check runs, then one
:class:`StrategyCheckError` lists every problem. What is checked:

* the registration: a known ``role`` (and a ``critic`` target, if any, that is a critic);
* the plugin's entry module imports none of the heavy libraries (``torch``, ``ray``, ``vllm`` ...);
* with each of ``missing`` made unimportable, loading the strategy is a :class:`PluginError` that
  says ``pip install`` followed by the registration's ``requires`` (never a traceback);
* where the backend imports here: the class implements the contract of its role (every abstract
  method, ``from_worker_config``) and takes every keyword the pipeline passes;
* ``build``: built from a worker config on roll's tiny model, it does its job: a train strategy's
  log-probs are label-aligned and masked, a step changes them, its exported weights load into
  ``hf_infer`` and reproduce them, a checkpoint round trip restores them exactly; an infer
  strategy generates token ids with one log-prob each and stamps the version it was given.
  Skipped (with a note) where the registration says ``needs_gpu`` and no CUDA device is present.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from roll_core.errors import PluginError
from roll_core.registry import Registration, Registry
from roll_core.testing.env_checks import CheckReport, SkipCheck, check_import_light


class StrategyCheckError(AssertionError):
    """A strategy broke the contract; the message lists every failed check."""


class StrategyCheckReport(CheckReport):
    """What :func:`check_strategy` found."""

    CHECK = "check_strategy"


_Skip = SkipCheck  # a check that cannot run here becomes a note


def check_strategy(name: str, *, missing: Sequence[str] = (), build: bool = True, registry: Registry | None = None,
                   cache_dir: str | None = None, raise_on_failure: bool = True) -> StrategyCheckReport:
    """Check the registered strategy ``name`` (see the module docstring).

    ``missing`` names the backend's own top-level modules (``("deepspeed",)``) for the install-hint
    check; ``build`` runs it on roll's tiny model (``cache_dir`` keeps that model). Raises
    :class:`StrategyCheckError` listing every failure (or returns the report with
    ``raise_on_failure=False``).
    """
    if registry is None:
        from roll_core.plugins import get_plugin_manager

        manager = get_plugin_manager()
        registry = manager.registry
    else:
        manager = None
    reg = registry.get("strategy", name)
    report = StrategyCheckReport(name)
    checks: list[tuple[str, Callable[[], Any]]] = [("registration", lambda: _check_registration(reg))]
    info = manager.get_plugin(reg.plugin) if manager is not None else None
    if info is not None:
        checks.append(("entry module stays import-light", lambda: check_import_light(info.module)))
    for module in missing:
        checks.append((f"install hint without {module}", lambda m=module: _check_install_hint(reg, m)))
    checks.append(("contract of its role", lambda: _check_contract(reg)))
    if build:
        checks.append(("works on the tiny model", lambda: _check_build(reg, cache_dir)))
    report.run(checks)
    if report.failures and raise_on_failure:
        raise StrategyCheckError(str(report))
    return report


# -- the checks ------------------------------------------------------------------------------
def _check_registration(reg: Registration) -> None:
    from roll_core.strategies.base import ROLE_CONTRACTS

    role = reg.options.get("role")
    assert role in ROLE_CONTRACTS, f"role option is {role!r}; expected one of {sorted(ROLE_CONTRACTS)}"
    assert role == "train" or "critic" not in reg.options, "only a train strategy can offer a critic"


def _check_install_hint(reg: Registration, module: str) -> None:
    target_module = reg.target.partition(":")[0]
    saved = {k: v for k, v in sys.modules.items() if k == target_module or k.startswith(target_module + ".")
             or k == module or k.startswith(module + ".")}
    try:
        for key in saved:
            del sys.modules[key]
        sys.modules[module] = None  # type: ignore[assignment]  # import module -> ImportError
        try:
            reg.load()
        except PluginError as exc:
            message = str(exc)
        else:
            raise AssertionError(f"loading {reg.target} with {module} missing did not fail with a PluginError")
    finally:
        sys.modules.pop(module, None)
        for key in [k for k in sys.modules if k == target_module or k.startswith(target_module + ".")]:
            del sys.modules[key]
        sys.modules.update(saved)
    assert "Traceback" not in message, "the install hint contains a traceback"
    assert "pip install" in message, f"no `pip install` command in the error: {message}"
    for requirement in reg.requires:
        assert requirement in message, f"the error does not name the requirement {requirement!r}: {message}"


def _load(reg: Registration) -> type:
    try:
        return reg.load()
    except PluginError as exc:
        raise _Skip(f"the backend is not importable here ({exc})") from None


def _check_contract(reg: Registration) -> None:
    from roll_core.strategies.base import ROLE_CONTRACTS, CriticStrategy, WorkerStrategy
    from roll_core.strategies.settings import train_worker_kwargs

    cls = _load(reg)
    contract = ROLE_CONTRACTS[reg.options["role"]]
    assert isinstance(cls, type) and issubclass(cls, contract), \
        f"{reg.target} is not a subclass of roll_core.strategies.base.{contract.__name__}"
    assert not inspect.isabstract(cls), \
        f"{reg.target} leaves abstract methods unimplemented: {sorted(cls.__abstractmethods__)}"
    assert cls.from_worker_config.__func__ is not WorkerStrategy.from_worker_config.__func__, \
        f"{reg.target} does not implement from_worker_config"
    if contract.__name__ == "TrainStrategy":  # the pipeline passes the shared train_worker_kwargs
        kwargs = train_worker_kwargs(cls, {"training_args": {"max_steps": 3}}, 0, "actor_train", {"trainable": False})
        named = set(inspect.signature(cls).parameters)
        assert set(kwargs) <= named, f"{reg.target}() does not take {sorted(set(kwargs) - named)}"
    critic = reg.options.get("critic")
    if critic:
        from roll_core.registry import import_target

        critic_cls = import_target(critic)
        assert isinstance(critic_cls, type) and issubclass(critic_cls, CriticStrategy), \
            f"critic option {critic} is not a subclass of roll_core.strategies.base.CriticStrategy"


def _check_build(reg: Registration, cache_dir: str | None) -> None:
    import torch

    if reg.options.get("needs_gpu") and not torch.cuda.is_available():
        raise _Skip("the registration says needs_gpu and no CUDA device is present")
    cls = _load(reg)
    with tempfile.TemporaryDirectory() as tmp:
        from roll_core.models import resolve_pretrain

        pretrain = resolve_pretrain("roll-tiny", cache_dir or tmp, seed=0)
        worker = {"model_args": {"dtype": "fp32"}, "training_args": {"learning_rate": 1e-2,
                  "per_device_train_batch_size": 2}, "generating_args": {"max_new_tokens": 4}}
        if reg.options["role"] == "train":
            _exercise_train(cls, worker, pretrain, tmp)
        else:
            _exercise_infer(cls, worker, pretrain)


def _tiny_batch() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (4, 10), generator=g)
    attention = torch.ones(4, 10, dtype=torch.long)
    attention[2:, 8:] = 0
    response = torch.zeros(4, 10, dtype=torch.long)
    response[:, 5:] = 1
    response *= attention
    return {"input_ids": ids * attention, "attention_mask": attention, "response_mask": response,
            "advantages": torch.ones(4, 9)}


def _reinforce(micro: Any, log_probs: Any, _entropy: Any) -> tuple[Any, dict[str, float]]:
    mask = micro["response_mask"][:, 1:].to(log_probs.dtype)
    return -(micro["advantages"] * log_probs * mask).sum() / 4, {}


def _exercise_train(cls: type, worker: dict[str, Any], pretrain: str, tmp: str) -> None:
    import torch

    from roll_core.strategies.hf_infer import HFInferStrategy

    batch = _tiny_batch()
    strategy = cls.from_worker_config(worker, pretrain, 0, num_training_steps=4)
    assert int(strategy.mini_batch_size) >= 1, "mini_batch_size must be a positive number of rows"
    before, _ = strategy.compute_log_probs(batch)
    assert tuple(before.shape) == (4, 9), f"log-probs must be label-aligned [B, L-1], got {list(before.shape)}"
    assert bool((before[:, :4] == 0).all()), "log-probs must be 0 outside response_mask[:, 1:]"
    metrics = strategy.train_step(batch, _reinforce)
    assert {"loss", "grad_norm", "lr"} <= set(metrics), f"train_step returned {sorted(metrics)}"
    after, _ = strategy.compute_log_probs(batch)
    assert not torch.allclose(before, after), "a train step with lr 1e-2 did not change the log-probs"
    assert float((after * batch["response_mask"][:, 1:]).sum()) > float(before.sum()), \
        "a REINFORCE step on positive advantages did not raise the log-likelihood"
    weights = strategy.export_weights()
    infer = HFInferStrategy(pretrain, dtype="fp32", device="cpu")
    infer.load_weights(weights, version=1)  # the HF names hf_infer (and vLLM) load
    path = f"{tmp}/ckpt"
    strategy.save_checkpoint(path)
    fresh = cls.from_worker_config(worker, pretrain, 0, num_training_steps=4)
    fresh.load_checkpoint(path)
    restored, _ = fresh.compute_log_probs(batch)
    torch.testing.assert_close(restored, after, msg="a checkpoint round trip changed the log-probs")


def _exercise_infer(cls: type, worker: dict[str, Any], pretrain: str) -> None:
    from roll_core.strategies.base import GenerationRequest, SamplingParams
    from roll_core.strategies.hf_train import HFTrainStrategy

    strategy = cls.from_worker_config(worker, pretrain, 0)
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    requests = [GenerationRequest("a", [5, 17, 40], greedy), GenerationRequest("b", [9, 9, 9, 9, 9], greedy)]
    outputs = strategy.generate(requests)
    assert [o.request_id for o in outputs] == ["a", "b"], "outputs must come back in request order"
    for out in outputs:
        assert 1 <= len(out.token_ids) <= 4 and len(out.logprobs) == len(out.token_ids), \
            "each generated token needs one log-prob, within max_new_tokens"
        assert out.finish_reason in ("stop", "length", "abort")
    weights = HFTrainStrategy(pretrain, seed=0, dtype="fp32", device="cpu").export_weights()
    strategy.load_weights(weights, version=3)
    assert strategy.policy_version == 3 and all(o.policy_version == 3 for o in strategy.generate(requests)), \
        "outputs after load_weights(version=3) must be stamped with version 3"
