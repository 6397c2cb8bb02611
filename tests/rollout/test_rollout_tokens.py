"""Token-in/token-out assembly, episodes and batches, without Ray."""

from __future__ import annotations

import asyncio
import functools

import pytest
import torch
from rollout_helpers import RecordingPolicy

from roll_core.chat.codec import ChatCodec
from roll_core.chat.trajectory import IncrementalPrompt, WindowedPrompt, state_hash
from roll_core.envs.prompt import Conversation
from roll_core.rollout.engine.batch import build_batch
from roll_core.rollout.engine.episode import EpisodeContext, play_episode
from roll_core.rollout.engine.messages import Ticket
from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec
from roll_core.rollout.engine.turn_policies import TurnPolicy, make_turn_policy
from roll_core.strategies.base import GenerationOutput

TEST_ENVS = "roll_rollout_testenvs"  # tests/rollout/roll_rollout_testenvs.py


def template_ids(tokenizer, messages, *, add_generation_prompt):
    out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def play_conversation(codec, responses, observations):
    """Drive IncrementalPrompt like the env loop does; responses are (text, closed) pairs."""
    conv = Conversation("You play a game. Answer with <answer>X</answer>.")
    builder = IncrementalPrompt(codec)
    mask = []
    prompts = []
    for obs, (text, closed) in zip(observations, responses):
        conv.observe(obs)
        piece = builder.prompt(conv.messages)
        builder.commit(piece)
        prompts.append((list(builder.ids), [dict(m) for m in conv.messages], piece))
        mask += [0] * len(piece.ids)
        ids = codec.encode(text) + (codec.end_of_turn_ids if closed else [])
        full, text = codec.response_texts(ids)
        builder.add_response(ids, full)
        mask += [1] * len(ids)
        conv.respond(text)
    return conv, builder, mask, prompts


OBSERVATIONS = ["grid:\nP__G\n__O_", "grid:\n_P_G\n__O_ ünïcode ✓", "grid:\n__PG\n__O_"]


def test_stream_equals_full_chat_template_render(codec, tokenizer):
    responses = [("<answer>Right</answer>", True), ("thinking... <answer>Right</answer>", True),
                 ("<answer>Right</answer>", True)]
    conv, builder, mask, prompts = play_conversation(codec, responses, OBSERVATIONS)
    # every turn's prompt is exactly the chat template of the conversation so far
    for ids, messages, piece in prompts:
        assert ids == template_ids(tokenizer, messages, add_generation_prompt=True)
        assert not piece.template_mismatch
    # the whole stream is the template render of the full conversation, minus the template's
    # closing newline after the last end-of-turn token (the final observation is never added)
    full = template_ids(tokenizer, conv.messages, add_generation_prompt=False)
    assert builder.ids == full[: len(builder.ids)]
    assert codec.decode(full[len(builder.ids):]) == "\n"
    # only generated tokens are trainable, and they are exactly the responses
    trainable = [t for t, m in zip(builder.ids, mask) if m]
    expected = [t for text, _ in responses for t in codec.encode(text) + codec.end_of_turn_ids]
    assert trainable == expected
    assert builder.text == codec.decode(builder.ids)


def test_response_cut_at_length_is_closed_by_the_next_prompt(codec, tokenizer):
    responses = [("<answer>Ri", False), ("<answer>Left</answer>", True)]
    conv, builder, mask, prompts = play_conversation(codec, responses, OBSERVATIONS[:2])
    second_prompt = prompts[1][2]
    assert second_prompt.text.startswith("<|im_end|>\n<|im_start|>user")  # the engine closes the turn
    assert prompts[1][0] == template_ids(tokenizer, prompts[1][1], add_generation_prompt=True)
    eot_position = len(prompts[0][0]) + len(codec.encode("<answer>Ri"))
    assert builder.ids[eot_position] == codec.eos_token_id and mask[eot_position] == 0


def test_template_that_rewrites_history_keeps_generated_tokens(tokenizer):
    trimming = tokenizer.chat_template.replace("message['content']", "(message['content'] | trim)")
    tok = type(tokenizer).from_pretrained(tokenizer.name_or_path) if tokenizer.name_or_path else tokenizer
    tok.chat_template = trimming
    codec = ChatCodec(tok)
    responses = [("  <answer>Up</answer>  ", True), ("<answer>Up</answer>", True)]
    conv, builder, mask, prompts = play_conversation(codec, responses, OBSERVATIONS[:2])
    piece = prompts[1][2]
    assert piece.template_mismatch
    assert piece.text.startswith("\n<|im_start|>user\n")  # rest of the end-of-turn, then the new turn
    generated = codec.encode("  <answer>Up</answer>  ") + codec.end_of_turn_ids
    start = len(prompts[0][0])
    assert builder.ids[start:start + len(generated)] == generated
    assert sum(mask) == len(generated) + len(codec.encode("<answer>Up</answer>")) + 1


def test_windowed_prompt_shows_only_the_last_turns(codec):
    conv = Conversation("system text")
    builder = WindowedPrompt(codec, 1)
    for i in range(3):
        conv.observe(f"observation {i}")
        piece = builder.prompt(conv.messages)
        conv.respond(f"<answer>{i}</answer>")
    text = piece.text
    assert "system text" in text and "observation 2" in text and "observation 1" in text
    assert "observation 0" not in text and "<answer>1</answer>" in text and "<answer>0</answer>" not in text


class FixedPolicy(TurnPolicy):
    """Answers 'Up' with log-prob -0.5 per token, stamped with version 3."""

    def __init__(self, codec):
        self.codec = codec

    async def generate(self, request, env, observation, version):
        ids = (self.codec.encode("<answer>Up</answer>") + self.codec.end_of_turn_ids)
        ids = ids[: request.sampling.max_new_tokens]
        return GenerationOutput(request.request_id, ids, [-0.5] * len(ids), "stop", policy_version=3)


@functools.cache
def counting_env(**env_config):
    """The test env ``test_counting`` bound with ``env_config`` (as resolve binds a run's envs)."""
    from roll_core.config import bind_env
    from roll_core.plugins import PluginManager

    return bind_env("test_counting", env_config, registry=PluginManager(extra_modules=[TEST_ENVS]).registry)


def counting_spec(**changes):
    values = dict(mode="train", seed=5, num_env_groups=1, group_size=1, max_env_num_per_worker=1,
                  group_tags=("Counting",), envs={"Counting": EnvSpec("Counting", counting_env(max_target=4))},
                  sequence_length=4096, policy="random", step_timeout_s=None)
    values.update(changes)
    return RolloutSpec(**values)


def run_episode(codec, registry, spec, policy, seed=11, env_config=None):
    from roll_core.config import bind_env
    from roll_core.envs.binding import build_env

    env_spec = spec.envs["Counting"]
    env = build_env(bind_env("test_counting", {**env_spec.env.config.model_dump(), **(env_config or {})},
                             registry=registry))
    ctx = EpisodeContext(spec=spec, codec=codec, threads=None)
    policy.start_episode(seed)
    return asyncio.run(play_episode(ctx, env, env_spec, Ticket(0, 0, seed, 0), 0, policy, route_key="k",
                                    cancelled=lambda: False))


def test_episode_marks_only_model_tokens_and_drops_the_final_observation(codec, test_registry):
    spec = counting_spec()
    traj = run_episode(codec, test_registry, spec, FixedPolicy(codec))
    ids, mask, logprobs = traj.token_stream()
    assert traj.terminated and traj.metrics["success"] == 1.0  # always Up reaches the target
    assert all(lp == -0.5 for lp, m in zip(logprobs, mask) if m) and all(lp == 0 for lp, m in zip(logprobs, mask) if not m)
    assert ids[-1] == codec.eos_token_id and mask[-1] == 1  # ends on the last response
    assert traj.min_version == traj.max_version == 3
    assert len(traj.turns) == traj.num_steps == traj.metrics["num_steps"]
    final_obs = "at " + str(len(traj.turns))
    assert final_obs not in codec.decode(ids).split("<|im_start|>assistant")[-1]
    assert codec.decode(ids) == codec.render(traj.messages, add_generation_prompt=False)[:len(codec.decode(ids))]


@pytest.mark.parametrize("granularity,window", [("trajectory", None), ("step", 1), ("step", 0)])
def test_the_model_is_conditioned_on_exactly_the_row_it_trains_on(codec, test_registry, granularity, window):
    """Each request's prompt is the row's tokens before that response: what is sampled is what trains
    (a prompt seen twice at generation, or missing, would make every log-prob off-policy)."""
    spec = counting_spec(granularity=granularity,
                         envs={"Counting": EnvSpec("Counting", counting_env(max_target=4), history_window=window)})
    policy = RecordingPolicy(codec)
    traj = run_episode(codec, test_registry, spec, policy, env_config={"max_target": 20, "max_steps": 5})
    assert len(policy.prompts) == len(traj.turns) >= 2
    if granularity == "trajectory":
        ids, mask, _ = traj.token_stream()
        starts = [i for i in range(len(mask)) if mask[i] and (i == 0 or not mask[i - 1])]
        assert [ids[:start] for start in starts] == policy.prompts
    else:
        assert [list(turn.prompt_ids) for turn in traj.turns] == policy.prompts


def test_sequence_length_ends_the_episode_cleanly(codec, test_registry):
    spec = counting_spec(sequence_length=300)
    env_config = {"max_target": 50, "max_steps": 40}
    traj = run_episode(codec, test_registry, spec, make_turn_policy("random", codec), env_config=env_config)
    ids, mask, _ = traj.token_stream()
    assert traj.truncated and traj.end_reason == "sequence_length"
    assert len(ids) <= 300 and mask[-1] == 1


def test_max_tokens_per_step_caps_every_response(codec, test_registry):
    spec = counting_spec(envs={"Counting": EnvSpec("Counting", counting_env(), max_tokens_per_step=2)})
    traj = run_episode(codec, test_registry, spec, make_turn_policy("random", codec))
    assert all(len(t.response_ids) == 2 and t.finish_reason == "length" for t in traj.turns)
    assert traj.metrics["action_is_valid"] == 0.0  # a cut-off answer is not an action


def test_trajectory_and_step_batches(codec, test_registry):
    spec = counting_spec()
    trajs = [run_episode(codec, test_registry, spec, FixedPolicy(codec), seed=s) for s in (1, 2, 3)]
    batch = build_batch(trajs, granularity="trajectory", pad_id=codec.pad_token_id)
    assert len(batch) == 3
    t = batch.tensors
    for i, traj in enumerate(trajs):
        ids, mask, logprobs = traj.token_stream()
        n = len(ids)
        assert t["input_ids"][i, :n].tolist() == ids and t["attention_mask"][i].sum() == n
        assert t["response_mask"][i, :n].tolist() == mask
        # label-aligned: index j holds the log-prob of token j + 1
        assert t["infer_logprobs"][i, : n - 1].tolist() == pytest.approx(logprobs[1:])
        assert t["scores"][i, n - 1] == traj.episode_reward and t["scores"][i].sum() == traj.episode_reward
        assert t["position_ids"][i, n - 1] == n - 1
    assert t["infer_logprobs"].shape == (3, t["input_ids"].shape[1] - 1)
    assert batch["traj_group_id"] == [tr.traj_group_id for tr in trajs]

    steps = build_batch(trajs, granularity="step", pad_id=codec.pad_token_id)
    assert len(steps) == sum(tr.num_steps for tr in trajs)
    assert steps["step"].tolist() == [k for tr in trajs for k in range(tr.num_steps)]
    first = trajs[0]
    for k, turn in enumerate(first.turns):
        row_mask = steps["response_mask"][k]
        assert int(row_mask.sum()) == len(turn.response_ids)  # only this step's response trains
        assert steps["state_hash"][k] == state_hash(turn.observation)
        assert steps["step_scores"][k] == turn.reward
        assert steps["episode_scores"][k] == first.episode_reward
    assert torch.equal(steps["input_ids"][first.num_steps - 1, : len(first.token_stream()[0])],
                       torch.tensor(first.token_stream()[0]))


@pytest.mark.parametrize("granularity", ["trajectory", "step"])
def test_a_demonstrators_slips_stay_in_the_context_and_out_of_the_loss(codec, test_registry, granularity):
    """warmup_sft.slip_rate: the scripted policy plays some random moves; those turns are played and
    kept in the conversation, but their tokens are no training target (DART-style noisy demonstrations)."""
    spec = counting_spec(granularity=granularity)
    env_config = {"max_target": 30, "max_steps": 30}
    slipping = make_turn_policy("scripted", codec, options={"slip_rate": 0.4})
    trajs = [run_episode(codec, test_registry, spec, slipping, seed=s, env_config=env_config) for s in (1, 2, 3)]
    turns = [turn for traj in trajs for turn in traj.turns]
    slips = [turn for turn in turns if not turn.trainable]
    assert 0.2 < len(slips) / len(turns) < 0.6  # about 40 %: the rate, drawn per turn
    # the solver's turns move towards the target; a slip is any valid move, so some go the other way
    assert {turn.response_text for turn in slips} == {"<answer>Up</answer>", "<answer>Down</answer>"}
    batch = build_batch(trajs, granularity=granularity, pad_id=codec.pad_token_id)
    masks = batch["response_mask"]
    if granularity == "trajectory":
        for i, traj in enumerate(trajs):
            ids, mask, _ = traj.token_stream()
            assert masks[i, :len(ids)].tolist() == mask
            assert sum(mask) == sum(len(t.response_ids) for t in traj.turns if t.trainable)
            assert codec.decode(ids).count("assistant\n<answer>") == traj.num_steps  # slips stay in the context
    else:
        assert [int(masks[k].sum()) for k in range(len(turns))] == [
            len(t.response_ids) if t.trainable else 0 for t in turns]
    # the same seed slips at the same turns; without slips every turn is the solver's and trains
    again = [run_episode(codec, test_registry, spec, slipping, seed=s, env_config=env_config) for s in (1, 2, 3)]
    assert [[t.trainable for t in tr.turns] for tr in again] == [[t.trainable for t in tr.turns] for tr in trajs]
    solver = run_episode(codec, test_registry, spec, make_turn_policy("scripted", codec), seed=1, env_config=env_config)
    assert all(turn.trainable for turn in solver.turns) and solver.metrics["success"] == 1.0


def test_policy_options_are_checked(codec):
    from roll_core.errors import ConfigError, RollError

    with pytest.raises(ConfigError, match="does not take the options"):
        make_turn_policy("random", codec, options={"slip_rate": 0.1})
    with pytest.raises(RollError, match=r"slip_rate must be in \[0, 1\)"):
        make_turn_policy("scripted", codec, options={"slip_rate": 1.0})
    with pytest.raises(ConfigError, match="takes no policy options"):
        make_turn_policy("model", codec, generate_scheduler=object(), options={"slip_rate": 0.1})


def test_windowed_episode_gives_step_rows_only(codec, test_registry):
    spec = counting_spec(granularity="step",
                         envs={"Counting": EnvSpec("Counting", counting_env(), history_window=1)})
    traj = run_episode(codec, test_registry, spec, FixedPolicy(codec))
    assert not traj.incremental
    with pytest.raises(ValueError, match="history window"):
        traj.token_stream()
    rows = build_batch([traj], granularity="step", pad_id=codec.pad_token_id)
    assert len(rows) == traj.num_steps


def test_codec_caches_return_what_the_tokenizer_returns(tokenizer, monkeypatch):
    """ChatCodec remembers encodings and renders (issue 20): the same ids and texts as the tokenizer,
    bounded, not shared between callers' lists, and conversations with tools are never cached."""
    import roll_core.chat.codec as chat

    monkeypatch.setattr(chat, "CACHE_SIZE", 4)
    codec = ChatCodec(tokenizer)
    texts = ["<answer>Up</answer>", "a frozen lake", "  spaced  text\n", "héllo wörld", "<answer>Up</answer>"]
    for text in texts * 2:
        assert codec.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert len(codec._encoded) == 4
    ids = codec.encode("a frozen lake")
    ids.append(-1)  # a caller extending its list must not change what the cache returns next time
    assert codec.encode("a frozen lake") == tokenizer.encode("a frozen lake", add_special_tokens=False)
    for ids in ([1, 2, 3, 40, 41], codec.encode("héllo wörld") + [codec.eos_token_id]):
        for skip in (False, True):
            assert codec.decode(ids, skip_special_tokens=skip) == tokenizer.decode(ids, skip_special_tokens=skip)

    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "state"}]
    for generation_prompt in (True, False, True):
        assert codec.render(messages, add_generation_prompt=generation_prompt) == tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt)
    assert len(codec._rendered) == 2
    tools = [{"type": "function", "function": {"name": "guess", "parameters": {"type": "object"}}}]
    codec.render(messages, add_generation_prompt=True, tools=tools)
    assert len(codec._rendered) == 2
    calls = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "guess", "arguments": {"n": 3}}}]}]
    codec.render(messages + calls, add_generation_prompt=False)  # unhashable content: rendered, not cached
    assert len(codec._rendered) == 2


def test_envs_whose_calls_only_compute_run_on_the_event_loop(codec, test_registry):
    """``TextEnv.inline_calls`` (issue 20): with a step timeout set, ordinary env calls go to the pool
    thread (so a hang costs one trajectory); an env that declares its calls compute-only is called on
    the event loop's own thread, and both play the same episode."""
    import threading

    from roll_core.config import bind_env
    from roll_core.envs.binding import build_env
    from roll_core.rollout.engine.env_threads import EnvThreads

    spec = counting_spec(step_timeout_s=30.0)
    env_spec = spec.envs["Counting"]

    def play(inline):
        env = build_env(bind_env("test_counting", env_spec.env.config.model_dump(), registry=test_registry))
        seen = []
        step = env.step

        def recording_step(action):
            seen.append(threading.get_ident())
            return step(action)

        env.step = recording_step
        env.inline_calls = inline
        threads = EnvThreads(2)
        ctx = EpisodeContext(spec=spec, codec=codec, threads=threads)

        async def episode():
            loop_thread = threading.get_ident()
            policy = FixedPolicy(codec)
            policy.start_episode(11)
            traj = await play_episode(ctx, env, env_spec, Ticket(0, 0, 11, 0), 0, policy, route_key="k",
                                      cancelled=lambda: False)
            return traj, loop_thread

        try:
            traj, loop_thread = asyncio.run(episode())
        finally:
            threads.shutdown()
        return traj, seen, loop_thread

    pooled, pooled_threads, loop = play(False)
    assert pooled_threads and all(t != loop for t in pooled_threads)
    inline, inline_threads, loop = play(True)
    assert inline_threads and all(t == loop for t in inline_threads)
    assert inline.token_stream()[0] == pooled.token_stream()[0] and inline.terminated and pooled.terminated


def test_collate_right_pads_each_row_and_puts_its_reward_on_its_last_token():
    from roll_core.rollout.engine.batch import collate

    rows = [([5, 6, 7], [0, 1, 1], [0.0, -0.5, -0.25]), ([8], [0], [0.0]), ([1, 2, 3, 4, 9], [0, 0, 1, 0, 1],
                                                                           [0.0, 0.0, -1.5, 0.0, -2.0])]
    out = collate(rows, [1.0, -1.0, 0.5], pad_id=0)
    assert out["input_ids"].tolist() == [[5, 6, 7, 0, 0], [8, 0, 0, 0, 0], [1, 2, 3, 4, 9]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert out["response_mask"].tolist() == [[0, 1, 1, 0, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 1]]
    assert out["position_ids"].tolist() == [[0, 1, 2, 0, 0], [0, 0, 0, 0, 0], [0, 1, 2, 3, 4]]
    assert out["infer_logprobs"].tolist() == [[-0.5, -0.25, 0.0, 0.0], [0.0] * 4, [0.0, -1.5, 0.0, -2.0]]
    assert out["scores"].tolist() == [[0, 0, 1.0, 0, 0], [-1.0, 0, 0, 0, 0], [0, 0, 0, 0, 0.5]]
    assert out["input_ids"].dtype == torch.long and out["infer_logprobs"].dtype == torch.float32
