"""Prompt datasets of the RLVR pipeline: JSON-lines files -> tokenised prompts tagged with a reward domain.

Import-light: nothing here imports torch or transformers (a tokenizer object is passed in).
"""

from roll_core.data.prompts import (
    TEMPLATES,
    PromptRow,
    PromptSampler,
    domain_of,
    load_prompts,
    read_jsonl,
)

__all__ = ["TEMPLATES", "PromptRow", "PromptSampler", "domain_of", "load_prompts", "read_jsonl"]
