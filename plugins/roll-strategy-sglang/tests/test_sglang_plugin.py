"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy) as far as a CPU
machine allows: registration, import lightness and the install hint (SGLang needs CUDA)."""

from __future__ import annotations

import importlib.util


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry):
    reg = roll_registry.get("strategy", "sglang")
    assert reg.options == {"role": "infer", "needs_gpu": True} and reg.distribution == "roll-strategy-sglang"
    report = roll_check_strategy("sglang", missing=("sglang",))
    assert report.ok, str(report)
    assert {"registration", "entry module stays import-light", "install hint without sglang"} <= set(report.passed)


def test_the_install_hint_names_cuda(roll_registry, monkeypatch):
    import sys

    import pytest

    from roll_core.errors import PluginError

    if importlib.util.find_spec("sglang") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "sglang", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_sglang.strategy", raising=False)
    with pytest.raises(PluginError, match="CUDA"):
        roll_registry.load("strategy", "sglang")


def test_do_sample_false_reaches_sglang_as_greedy():
    """generating_args -> roll's one converter -> SGLang's sampling_params, without SGLang installed."""
    from roll_strategy_sglang.sampling import sglang_sampling_params

    from roll_core.strategies.generating_args import sampling_from_generating_args

    args = {"do_sample": False, "temperature": 0.8, "top_p": 0.9, "top_k": 0, "max_new_tokens": 16,
            "stop_strings": ["</answer>"]}
    assert sglang_sampling_params(sampling_from_generating_args(args), extra_stop_token_ids=(2,)) == {
        "max_new_tokens": 16, "temperature": 0.0, "top_p": 0.9, "top_k": -1, "stop_token_ids": [2],
        "stop": ["</answer>"], "no_stop_trim": True}
    sampled = sglang_sampling_params(sampling_from_generating_args({**args, "do_sample": True}))
    assert sampled["temperature"] == 0.8
