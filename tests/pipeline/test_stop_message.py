"""The one message a run stops with when it lost ranks (issue 35): every rank, its node, how to continue."""

from __future__ import annotations

from roll_core.pipeline.stop import LostRank, clean, resume_command, stop_message

NODE_A = "3f9c2a7d1e5b4c6a8d0e2f4a6b8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e"


def test_the_message_names_every_lost_rank_node_and_the_command_with_the_runs_overrides():
    lost = [
        LostRank("actor_train", 1, NODE_A, "10.0.0.2", "\x1b[31mThe actor died because its node has died.\x1b[0m"),
        LostRank("actor_infer", 2, NODE_A, "10.0.0.2", "The actor died unexpectedly before finishing this task."),
    ]
    argv = ["run", "cfg.yaml", "max_steps=8", "resume_from_checkpoint=old", "--address", "auto"]
    text = stop_message(lost, step=5, why="a lost training rank cannot be replaced mid-step.",
                        checkpoint=(4, "/o/checkpoint-4"), argv=argv)
    assert text == (
        "the run lost 2 ranks and stops at step 5 (a lost training rank cannot be replaced mid-step). Lost: "
        "actor_infer rank 2 on node 3f9c2a7d1e5b (10.0.0.2): The actor died unexpectedly before finishing this "
        "task; actor_train rank 1 on node 3f9c2a7d1e5b (10.0.0.2): The actor died because its node has died. "
        "Continue from the last checkpoint (step 4) with: roll run cfg.yaml max_steps=8 --address auto "
        "resume_from_checkpoint=/o/checkpoint-4")
    assert "\x1b" not in text and ".." not in text


def test_without_a_checkpoint_or_a_command_line():
    one = [LostRank("actor_infer", 0, "", "?", "gone")]
    assert stop_message(one, step=0, why="none of the 1 actor_infer workers is left", checkpoint=None,
                        argv=None) == (
        "the run lost 1 rank and stops at step 0 (none of the 1 actor_infer workers is left). Lost: actor_infer "
        "rank 0 on node ?: gone. No checkpoint was saved yet; start the run again (save_steps sets how often "
        "it saves).")
    assert resume_command(None, "/c 1") == "roll run CONFIG 'resume_from_checkpoint=/c 1' (with the run's overrides)"
    assert clean("  first line..\nsecond") == "first line"
