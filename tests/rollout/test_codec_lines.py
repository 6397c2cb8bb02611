"""ChatCodec encodes new texts line by line (issue 39): the same ids as the tokenizer, for every
built-in env, and only for tokenizers where a line start is provably a token boundary."""

from __future__ import annotations

import asyncio
import random

import pytest
from rollout_helpers import RecordingPolicy
from tokenizers import pre_tokenizers

from roll_core.chat.codec import ChatCodec
from roll_core.chat.line_split import lines_tokenise_independently, split_lines
from roll_core.rollout.engine.episode import EpisodeContext, play_episode
from roll_core.rollout.engine.messages import Ticket
from roll_core.rollout.engine.spec import EnvSpec, RolloutSpec


def whole_ids(tokenizer, text):
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def test_split_lines_cuts_only_before_printable_ascii():
    assert split_lines("a\nb\n\nc\n d\n✓\n") == ["a\n", "b\n\n", "c\n d\n✓\n"]
    assert "".join(split_lines("x.\n\ny z\n")) == "x.\n\ny z\n"


def test_line_by_line_ids_equal_the_whole_texts_ids(tokenizer):
    """Random texts built from what breaks naive cuts: white space around newlines, punctuation runs
    before newlines, digits, contractions, accented and non-Latin letters, special tokens."""
    codec = ChatCodec(tokenizer)
    assert codec.by_line
    pieces = ["\n", "\n\n", " \n", "  \n", "\t\n", "\r\n", ".", "!\n", "'s", "'ll", " ", "  ", "a", "Ab", "42",
              "7", "é", "ü", "✓", "ω", "_", "P", "G", "O", "<answer>", "</answer>", "<|im_end|>", "<|im_start|>", "\n<"]
    rng = random.Random(0)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 40))) for _ in range(3000)]
    for text in texts:
        assert codec.encode(text) == whole_ids(tokenizer, text), repr(text)
    assert len(codec._lines) > 100  # the line path was taken


def test_a_tokenizer_whose_lines_are_not_independent_is_encoded_whole(tokenizer):
    """GPT-2's byte-level regex splits ``"a  \\nb"`` as ``"  "``, ``"\\n"`` but ``"a  \\n"`` as ``"  \\n"``:
    cutting at the line start would change the pre-tokens, so the codec must not."""
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert [t for t, _ in gpt2.pre_tokenize_str("a  \nb")][:3] != [t for t, _ in gpt2.pre_tokenize_str("a  \n")]
    tok = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tok.backend_tokenizer.pre_tokenizer = gpt2
    assert lines_tokenise_independently(tokenizer.backend_tokenizer)
    assert not lines_tokenise_independently(tok.backend_tokenizer)
    codec = ChatCodec(tok)
    assert not codec.by_line
    assert codec.encode("a  \nb") == whole_ids(tok, "a  \nb") and not codec._lines


def test_an_added_token_that_eats_the_newline_before_it_turns_line_encoding_off(tokenizer):
    """A token with ``lstrip`` takes the white space to its left, the newline included: ``"x\n<act>"``
    is then not ``"x\n"`` followed by ``"<act>"``."""
    from tokenizers import AddedToken

    tok = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tok.backend_tokenizer.add_special_tokens([AddedToken("<act>", lstrip=True)])
    whole = whole_ids(tok, "x\n<act>")
    assert whole != whole_ids(tok, "x\n") + whole_ids(tok, "<act>")
    assert not lines_tokenise_independently(tok.backend_tokenizer)
    codec = ChatCodec(tok)
    assert not codec.by_line and codec.encode("x\n<act>") == whole


@pytest.mark.parametrize("env_name", ["frozen_lake", "sokoban", "sokoban_xsb", "terminal_easy", "webshop"])
def test_every_turns_prompt_is_the_full_render_encoded_whole(tokenizer, env_name):
    """For every built-in env, over multi-turn episodes: the prompt ids the engine sends (its stream,
    with each turn's new text encoded line by line) are exactly the tokenizer's encoding of the chat
    template rendered over the whole conversation so far."""
    from roll_core.config import bind_env
    from roll_core.envs.binding import build_env

    codec = ChatCodec(tokenizer)
    binding = bind_env(env_name, {})
    env_spec = EnvSpec(env_name, binding, max_steps=6)
    spec = RolloutSpec(mode="train", seed=3, num_env_groups=1, group_size=1, max_env_num_per_worker=1,
                       group_tags=(env_name,), envs={env_name: env_spec}, sequence_length=16384, policy="random",
                       step_timeout_s=None)
    env = build_env(binding)
    ctx = EpisodeContext(spec=spec, codec=codec, threads=None)
    turns = longest = 0
    for seed in range(16):
        if turns >= 8 and longest >= 2:
            break
        policy = RecordingPolicy(codec)
        policy.start_episode(seed)
        traj = asyncio.run(play_episode(ctx, env, env_spec, Ticket(0, seed, seed, 0), 0, policy, route_key="k",
                                        cancelled=lambda: False))
        users = [i for i, m in enumerate(traj.messages) if m["role"] == "user"]
        assert len(policy.prompts) == len(traj.turns)
        for k, prompt in enumerate(policy.prompts):
            text = tokenizer.apply_chat_template(traj.messages[: users[k] + 1], tokenize=False,
                                                 add_generation_prompt=True)
            assert prompt == whole_ids(tokenizer, text), (env_name, seed, k)
        assert traj.template_mismatches == 0
        turns += len(traj.turns)
        longest = max(longest, len(traj.turns))
    assert turns >= 8 and longest >= 2 and codec._lines  # multi-turn, and the line path was taken
