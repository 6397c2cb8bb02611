"""``generating_args`` -> sampling settings: one converter, and ``do_sample: false`` greedy on every path.

The paths: the agentic rollout (its spec and every turn's params, built from a resolved config),
the RLVR rollout (training and validation), ``hf_infer`` built from a worker config (really
generating the argmax tokens); the vLLM and SGLang conversions are tested in their plugins' tests.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from roll_core.config import resolve, validate_config
from roll_core.errors import ConfigError
from roll_core.strategies.base import GenerationRequest, SamplingParams
from roll_core.strategies.generating_args import FIXED, sampling_from_generating_args

SAMPLED = {"temperature": 0.9, "top_p": 0.8, "top_k": 20, "max_new_tokens": 12}


def agentic(generating_args, **extra):
    return validate_config({
        "sequence_length": 256, "pretrain": "roll-tiny", "rollout_batch_size": 4,
        "actor_infer": {"generating_args": generating_args},
        "train_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 1, "group_size": 4},
        "val_env_manager": {"tags": ["FrozenLake"], "num_env_groups": 2}, **extra})


def rlvr(generating_args, **extra):
    return validate_config({
        "pipeline_type": "rlvr", "sequence_length": 64, "prompt_length": 32, "pretrain": "roll-tiny",
        "rewards": {"math": {}}, "actor_infer": {"generating_args": generating_args}, **extra})


# -- the converter -------------------------------------------------------------------------------
def test_the_converter_reads_sections_mappings_and_nothing_alike():
    section = agentic(SAMPLED).actor_infer.generating_args
    expected = SamplingParams(max_new_tokens=12, temperature=0.9, top_p=0.8, top_k=20)
    assert sampling_from_generating_args(section) == expected
    assert sampling_from_generating_args(SAMPLED) == expected
    assert sampling_from_generating_args(SimpleNamespace(**SAMPLED)) == expected
    assert sampling_from_generating_args(None) == SamplingParams()
    assert sampling_from_generating_args({"top_k": -1, "max_new_tokens": None}).top_k == 0  # -1: no top-k
    assert sampling_from_generating_args({"stop_strings": ["</answer>"], "stop_token_ids": [7]}).stop_token_ids == (7,)


@pytest.mark.parametrize("args", [{**SAMPLED, "do_sample": False}, {**SAMPLED, "temperature": 0.0}])
def test_do_sample_false_or_temperature_zero_is_greedy(args):
    params = sampling_from_generating_args(args)
    assert params.greedy and params.temperature == 0.0 and (params.top_p, params.top_k) == (0.8, 20)
    assert sampling_from_generating_args(SAMPLED, greedy=True).greedy  # validation asks for greedy
    assert not sampling_from_generating_args({**SAMPLED, "do_sample": True}).greedy


def test_fixed_fields_are_refused_from_plain_mappings_too():
    with pytest.raises(ConfigError, match=r"generating_args.num_beams is 4, but roll supports only 1: roll samples"):
        sampling_from_generating_args({"num_beams": 4})
    assert sampling_from_generating_args({"num_beams": 1, "repetition_penalty": 1.0}) == SamplingParams()


def test_the_fixed_table_is_the_schemas():
    from roll_core.config.base import is_fixed
    from roll_core.config.workers import GeneratingArgs

    assert FIXED == {name: field.default for name, field in GeneratingArgs.model_fields.items() if is_fixed(field)}


# -- the agentic rollout ------------------------------------------------------------------------
def test_agentic_rollout_is_greedy_with_do_sample_false(roll_registry):
    """Failed before the shared converter: the agentic spec kept sampling at temperature 0.9."""
    from roll_core.rollout.engine.episode import turn_sampling
    from roll_core.rollout.engine.spec_from_run import rollout_spec

    greedy = rollout_spec(resolve(agentic({**SAMPLED, "do_sample": False}), registry=roll_registry, roles=()))
    assert greedy.sampling.temperature == 0.0 and greedy.sampling.greedy
    assert turn_sampling(greedy, greedy.envs["FrozenLake"]).greedy  # what every turn's request carries
    sampled = rollout_spec(resolve(agentic(SAMPLED), registry=roll_registry, roles=()))
    assert (sampled.sampling.temperature, sampled.sampling.top_p, sampled.sampling.top_k) == (0.9, 0.8, 20)
    val = rollout_spec(resolve(agentic(SAMPLED), registry=roll_registry, roles=()), "val")
    assert val.sampling.greedy  # validation plays greedily either way


# -- the RLVR rollout ---------------------------------------------------------------------------
def test_rlvr_rollout_is_greedy_with_do_sample_false():
    from roll_core.pipeline.rlvr_pipeline import rlvr_sampling

    config = rlvr({**SAMPLED, "do_sample": False})
    assert rlvr_sampling(config, "train").greedy
    assert rlvr_sampling(config, "val").greedy  # no validation section: actor_infer's settings
    sampled = rlvr(SAMPLED)
    assert rlvr_sampling(sampled, "train").temperature == 0.9 and not rlvr_sampling(sampled, "val").greedy
    assert rlvr_sampling(rlvr(SAMPLED, val_greedy=True), "val").greedy
    own = rlvr(SAMPLED, validation={"generating_args": {**SAMPLED, "do_sample": False}})
    assert rlvr_sampling(own, "val").greedy and not rlvr_sampling(own, "train").greedy


# -- hf_infer -----------------------------------------------------------------------------------
def argmax_tokens(model, prompt: list[int], n: int, eos: set[int]) -> list[int]:
    """Greedy decoding the plain way: a full forward per token, the argmax of the last position."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            token = int(model(torch.tensor([ids])).logits[0, -1].argmax())
            ids.append(token)
            if token in eos:
                break
    return ids[len(prompt):]


def test_hf_infer_built_with_do_sample_false_generates_the_argmax_tokens(peaked_dir):
    from roll_core.strategies.hf_infer import HFInferStrategy

    worker = {"model_args": {"dtype": "fp32"}, "strategy_args": {"strategy_config": {"device": "cpu"}},
              "generating_args": {"do_sample": False, "temperature": 1.5, "top_p": 1.0, "top_k": 0,
                                  "max_new_tokens": 12}}
    outputs = []
    for seed in (0, 1):
        infer = HFInferStrategy.from_worker_config(worker, peaked_dir, seed=seed)
        assert infer.default_sampling.greedy
        prompts = [[5, 17, 40, 3], [9, 9, 9, 9, 9, 9, 2]]
        got = infer.generate([GenerationRequest(f"r{i}", p, infer.default_sampling) for i, p in enumerate(prompts)])
        outputs.append([o.token_ids for o in got])
        assert [o.token_ids for o in got] == [argmax_tokens(infer.model, p, 12, infer.eos_token_ids) for p in prompts]
    assert outputs[0] == outputs[1]  # greedy draws nothing from the seeded generator
    sampled = HFInferStrategy.from_worker_config({**worker, "generating_args": {**worker["generating_args"],
                                                                                 "do_sample": True}}, peaked_dir, seed=0)
    draws = sampled.generate([GenerationRequest("s", [5, 17, 40, 3], sampled.default_sampling)])[0].token_ids
    assert draws != outputs[0][0]  # at temperature 1.5 the same request samples something else
