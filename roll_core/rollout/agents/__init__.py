"""Agent code (OpenAI chat API) played as an env: episodes recorded by :mod:`roll_core.gateway`."""
