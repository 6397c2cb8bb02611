"""The agent gateway: an OpenAI-compatible endpoint in front of the rollout's generation.

Agent code written against the OpenAI chat API trains unchanged: roll serves the policy at a
per-episode base URL, records every completion's tokens and log-probs server-side (never
re-tokenising text), stamps each with its policy version, and turns an episode's calls into
training rows.

* :mod:`.protocol` -- request validation, OpenAI-style errors, response bodies
* :mod:`.tools` -- message and tool normalisation, tool-call parsing
* :mod:`.session` -- one episode's calls: prompts, sampling, recording
* :mod:`.merge` -- calls -> samples (one trajectory, or several when history was rewritten)
* :mod:`.server` -- the FastAPI / uvicorn server

Agents plug in through ``roll_register_agents``; :mod:`roll_core.rollout.agents.agent` runs them.
"""
