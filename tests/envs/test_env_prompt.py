"""The prompts a model sees: turn messages, conversations, ROLL-style templates."""

import pytest
from roll_tiny_envs import CounterEnv

from roll_core.envs.prompt import Conversation, format_example, format_turn_prompt, render_messages
from roll_core.errors import ConfigError


def test_turn_prompt_has_state_budget_and_format():
    text = format_turn_prompt("value=2", turn=3, actions_left=1, last_reward=-0.1,
                              format_example="<answer>Inc</answer>", max_tokens=64)
    assert text.splitlines() == [
        "Reward of your last action: -0.1",
        "Turn 3. State:",
        "value=2",
        "You have 1 action left.",
        "Think briefly if you need to, then give exactly one action in the form <answer>Inc</answer>, "
        "in at most 64 tokens.",
    ]
    assert format_turn_prompt("s", turn=1).splitlines() == ["Turn 1. State:", "s"]


def test_conversation_follows_the_episode():
    env = CounterEnv()
    observation, _ = env.reset(seed=0)
    conversation = Conversation.for_env(env)
    assert conversation.messages == [{"role": "system", "content": env.instruction}]
    assert format_example(env) == "<answer>Inc</answer>"
    conversation.observe(observation, actions_left=20)
    conversation.respond("<answer>Inc</answer>")
    conversation.observe("value=9", last_reward=0.0, actions_left=19)
    roles = [m["role"] for m in conversation.messages]
    assert roles == ["system", "user", "assistant", "user"] and conversation.turn == 2
    assert "Turn 2. State:\nvalue=9" in conversation.messages[-1]["content"]
    assert conversation.window(1) == [conversation.messages[0], conversation.messages[-1]]
    assert conversation.window(None) == conversation.messages
    assert conversation.window(0) == conversation.messages[:1]
    assert render_messages(conversation.messages[:2]).startswith("[system]\n")


def test_roll_templates():
    roll_template = ("Turn {turn_idx}:\nState:\n{state}\nYou have {actions_left} actions left. "
                     "Max response length: {max_response_length} words (tokens).\nDecide the next action:\n")
    conversation = Conversation("Push boxes.", system_template="You're a helpful assistant.",
                                turn_template=roll_template, max_tokens=100)
    message = conversation.observe("#P#", actions_left=5)
    assert message["content"].startswith("Turn 1:\nState:\n#P#\nYou have 5 actions left. Max response length: 100")
    assert conversation.messages[0]["content"] == "You're a helpful assistant.\nPush boxes."
    wrapped = Conversation("Push boxes.", system_template="Rules: {instruction} Good luck.")
    assert wrapped.messages[0]["content"] == "Rules: Push boxes. Good luck."


def test_bad_template_is_a_config_error():
    conversation = Conversation("x", turn_template="State {stat}")
    with pytest.raises(ConfigError, match=r"\{state\}"):
        conversation.observe("s")
