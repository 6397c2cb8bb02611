"""Built-in estimators and losses are plugins; a third-party plugin can add an estimator or a loss."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
import yaml

from roll_core.algorithms.advantages import compute_advantages
from roll_core.plugins import PluginManager

ESTIMATORS = {"gae", "reinforce", "grpo", "agentic_reinforce", "step_reinforce", "gigpo"}
LOSSES = {"vanilla", "ppo", "tis", "topr", "cispo", "kimi15"}


def test_builtins_are_registered_under_the_algorithms_plugin():
    manager = PluginManager()  # with entry points: other plugins cannot hide or break the built-ins
    registry = manager.registry
    assert ESTIMATORS <= set(registry.names("advantage_estimator"))
    assert LOSSES <= set(registry.names("policy_loss"))
    info = manager.get_plugin("algorithms")
    assert info.status == "ok" and info.builtin and info.distribution == "roll-core"
    assert {(r.kind, r.name) for r in info.provides} == (
        {("advantage_estimator", n) for n in ESTIMATORS} | {("policy_loss", n) for n in LOSSES}
    )
    for reg in info.provides:
        assert reg.plugin == "algorithms" and reg.description
        assert callable(reg.load())
    options = {r.name: dict(r.options) for r in registry.all("advantage_estimator")}
    assert options["gae"]["needs_critic"] is True
    assert {n for n, o in options.items() if o.get("granularity") == "step"} == {"gigpo", "step_reinforce"}


def test_builtin_module_does_not_import_torch():
    """Registration stays lazy: names and "module:attr" strings only (other built-ins are not checked)."""
    code = (
        "import sys, roll_core.builtin.algorithms as m; names = []; "
        "reg = lambda name, target, **kw: names.append(name); "
        "m.roll_register_advantage_estimators(register=reg); m.roll_register_policy_losses(register=reg); "
        "assert len(names) == 12, names; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_roll_plugins_list_shows_them(monkeypatch, capsys):
    from roll_core.cli import main
    from roll_core.plugins import reset_plugin_manager

    monkeypatch.setenv("ROLL_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    try:
        assert main(["plugins", "list", "--json"]) == 0
    finally:
        reset_plugin_manager()
    plugins = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    provided = {(r["kind"], r["name"]) for r in plugins["algorithms"]["provides"]}
    assert plugins["algorithms"]["distribution"] == "roll-core"
    assert {("advantage_estimator", n) for n in ESTIMATORS} <= provided
    assert {("policy_loss", n) for n in LOSSES} <= provided


PLUGIN = '''
"""A throwaway third-party plugin: a baseline-free estimator with its own response reward."""
from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_advantage_estimators(register):
    register("constant_baseline", "{module}:constant_baseline", description="reward minus 0.5",
             needs_critic=False, granularity="trajectory")


def _shifted(data, config, pipeline):
    return data["scores"].float() - 0.5


def constant_baseline(data, config):
    import torch

    adv = torch.flip(torch.cumsum(torch.flip(data["token_level_rewards"], [1]), 1), [1])
    return {{"advantages": adv, "returns": adv, "plugin/rows": float(adv.shape[0])}}


constant_baseline.response_rewards = _shifted
'''


def test_third_party_plugin_registers_an_estimator_selected_from_yaml(tmp_path, monkeypatch, make_config):
    module = "roll_thirdparty_estimator_plugin"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(module=module)))
    monkeypatch.syspath_prepend(str(tmp_path))
    manager = PluginManager(autoload=False, extra_modules=[module])
    assert manager.get_plugin(module).status == "ok"
    reg = manager.registry.get("advantage_estimator", "constant_baseline")
    assert reg.plugin == module and callable(reg.load())

    overrides = yaml.safe_load("adv_estimator: constant_baseline\ngamma: 1.0\n")
    config = make_config(**overrides)
    data = {"scores": torch.tensor([1.0, 0.0]), "response_mask": torch.tensor([[0, 1, 1], [0, 0, 1]])}
    estimator = manager.registry.get("advantage_estimator", config.adv_estimator).load()  # what resolve binds
    out, metrics = compute_advantages(data, config, pipeline="agentic", estimator=estimator)
    torch.testing.assert_close(out["advantages"], torch.tensor([[0.5, 0.5], [0.0, -0.5]]))
    assert metrics["plugin/rows"] == 2.0
    # the built-ins are untouched and still selectable next to it
    assert "grpo" in manager.registry.names("advantage_estimator")


LOSS_PLUGIN = '''
"""A throwaway third-party plugin: the plain policy gradient, -A log p (no ratio, no clipping)."""
from roll_core.hookspecs import hookimpl


@hookimpl
def roll_register_policy_losses(register):
    register("plain_pg", "{module}:plain_pg", description="-advantage * log-prob")


def plain_pg(log_probs, old_log_probs, advantages, config, *, ratio=None, scores=None, **_):
    return -advantages * log_probs
'''


def test_third_party_plugin_registers_a_policy_loss_selected_from_yaml(tmp_path, monkeypatch, make_config):
    """log p = [[-0.5, -1, -2]], A = [[1, -1, 3]], every token trained: token-mean of -A log p =
    (0.5 - 1 + 6) / 3 = 1.833333; the gradient on each log p is -A / 3."""
    from roll_core.algorithms.aggregation import Normalisers
    from roll_core.algorithms.objective import policy_loss

    module = "roll_thirdparty_loss_plugin"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(LOSS_PLUGIN.format(module=module)))
    monkeypatch.syspath_prepend(str(tmp_path))
    manager = PluginManager(autoload=False, extra_modules=[module])
    config = make_config(pg_variant="plain_pg", loss_agg_mode="token-mean")
    variant = manager.registry.get("policy_loss", config.actor_train.pg_variant).load()  # what resolve binds
    log_probs = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
    data = {"old_log_probs": torch.tensor([[-0.4, -1.0, -2.5]]), "advantages": torch.tensor([[1.0, -1.0, 3.0]]),
            "response_mask": torch.tensor([[0, 1, 1, 1]])}
    mask = data["response_mask"][:, 1:].float()
    loss, metrics = policy_loss(data, log_probs, config, loss_variant=variant,
                                normalisers=Normalisers.from_mask(mask, seq_len=3))
    assert float(loss.detach()) == pytest.approx(5.5 / 3) and metrics["actor/pg_loss"] == pytest.approx(5.5 / 3)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.0, 1.0, -3.0]]) / 3)


def test_plugin_loss_reads_config_like_builtins():
    from roll_core.algorithms.losses import ppo

    config = SimpleNamespace(
        pg_clip=0.2,
        use_pg_clip_range=False,
        pg_clip_low=0.2,
        pg_clip_high=0.2,
        dual_clip_loss=False,
        actor_train=SimpleNamespace(dual_clip_c=3.0),
    )
    out = ppo(torch.log(torch.tensor([0.65])), torch.log(torch.tensor([0.5])), torch.tensor([1.0]), config)
    assert float(out) == pytest.approx(-1.2)
