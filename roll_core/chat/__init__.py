"""What the rollout engine and the agent gateway share: chat templates and token-level trajectories.

It sits below both (:mod:`roll_core.rollout` and :mod:`roll_core.gateway` each import it, never
each other's internals):

* :mod:`.codec` -- chat-template rendering and tokenisation (:class:`~.codec.ChatCodec`).
* :mod:`.trajectory` -- trajectories assembled token-in/token-out, turn by turn.
"""
