"""The plugin honours roll's strategy contract (roll_core.testing.check_strategy): registration,
import lightness and the install hint; the engine itself is exercised in test_vllm_strategy.py."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from roll_core.errors import PluginError


def test_honours_the_strategy_contract(roll_check_strategy, roll_registry):
    reg = roll_registry.get("strategy", "vllm")
    assert reg.options == {"role": "infer", "serves_lora": True, "needs_gpu": False} and reg.distribution == "roll-strategy-vllm"
    report = roll_check_strategy("vllm", missing=("vllm",), build=False)
    assert report.ok, str(report)


def test_the_install_hint_names_the_cpu_build_too(roll_registry, monkeypatch):
    if importlib.util.find_spec("vllm") is not None:  # installed here: make it look missing
        monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.delitem(sys.modules, "roll_strategy_vllm.strategy", raising=False)
    with pytest.raises(PluginError, match=r"roll-strategy-vllm\[cpu\]"):
        roll_registry.load("strategy", "vllm")


def test_do_sample_false_reaches_vllm_as_greedy():
    """generating_args -> roll's one converter -> vLLM's sampling keywords, without vLLM installed."""
    from roll_strategy_vllm.sampling import vllm_sampling_kwargs

    from roll_core.strategies.generating_args import sampling_from_generating_args

    args = {"do_sample": False, "temperature": 0.8, "top_p": 0.9, "top_k": -1, "max_new_tokens": 16}
    greedy = vllm_sampling_kwargs(sampling_from_generating_args(args), extra_stop_token_ids=(2,))
    assert greedy == {"max_tokens": 16, "temperature": 0.0, "top_p": 0.9, "top_k": 0, "seed": None, "stop": None,
                      "stop_token_ids": [2], "logprobs": 0, "detokenize": False}
    sampled = vllm_sampling_kwargs(sampling_from_generating_args({**args, "do_sample": True, "top_k": 50}))
    assert (sampled["temperature"], sampled["top_k"]) == (0.8, 50)
    if importlib.util.find_spec("vllm") is not None:  # where vLLM is installed: it takes them, greedily
        from vllm import SamplingParams
        from vllm.sampling_params import SamplingType

        assert SamplingParams(**greedy).sampling_type == SamplingType.GREEDY
