"""Train and infer backends; built-in ``hf_train`` / ``hf_infer`` live here."""
