"""The RLVR rollout: prompts -> sampled responses -> per-domain verifiable rewards."""
