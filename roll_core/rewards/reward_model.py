"""The ``reward_model`` reward: a sequence-classification model (``AutoModelForSequenceClassification``)
scores prompt + response; the score is the first label's logit (one label, the usual RM head), or
the last label's probability for a classifier with several labels.

The model is ``model_args.model_name_or_path`` of the domain's ``rewards`` section (anything
``pretrain`` accepts; ``roll-tiny-rm`` is a tiny random one built locally), loaded once by each rank
of the domain's reward worker group (it always runs in workers: a model does not belong in the driver).
``model_args.dtype`` and ``strategy_args.strategy_config.device`` are read.
"""

from __future__ import annotations

import threading
from typing import Any

from roll_core.errors import ConfigError

#: ``model_args.dtype`` names -> torch dtype names
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def torch_dtype(dtype: str | None) -> Any:
    """The torch dtype of ``model_args.dtype`` (``fp32`` when unset; a torch name passes through)."""
    import torch

    return getattr(torch, _DTYPES.get(dtype or "fp32", dtype or "float32"))


def model_settings(section: Any, kind: str, what: str, *, seed: int = 0) -> tuple[str, str | None, str | None]:
    """``(model directory, dtype, device)`` of a model-backed reward's ``rewards.<domain>`` section:
    ``model_args.model_name_or_path`` resolved like ``pretrain``, ``model_args.dtype`` and
    ``strategy_args.strategy_config.device``; ``kind`` and ``what`` name the reward in the error."""
    from roll_core.models import resolve_pretrain

    model_args = getattr(section, "model_args", None)
    path = getattr(model_args, "model_name_or_path", None)
    if not path:
        raise ConfigError(f"the {kind} reward needs rewards.<domain>.model_args.model_name_or_path ({what}).")
    strategy_args = getattr(section, "strategy_args", None)
    device = dict(getattr(strategy_args, "strategy_config", None) or {}).get("device")
    return resolve_pretrain(path, seed=seed), getattr(model_args, "dtype", None), device


class SequenceClassifierReward:
    """``rm(prompt, response, reference) -> float`` (the reference is not used)."""

    def __init__(self, model_dir: str, *, dtype: str | None = None, device: str | None = None,
                 max_length: int = 4096):
        import torch
        from transformers import AutoModelForSequenceClassification

        from roll_core.models import load_tokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = load_tokenizer(model_dir)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_dir, torch_dtype=torch_dtype(dtype))
        self.model.to(self.device).eval()
        self.max_length = int(max_length)
        self._lock = threading.Lock()  # a reward worker scores several samples at once

    @classmethod
    def runs_in_workers(cls, section: Any) -> bool:
        return True

    @classmethod
    def from_reward_config(cls, section: Any, *, seed: int = 0, **_: Any) -> SequenceClassifierReward:
        path, dtype, device = model_settings(section, "reward_model", "a sequence-classification checkpoint; "
                                             "roll-tiny-rm is a tiny local one", seed=seed)
        return cls(path, dtype=dtype, device=device)

    def __call__(self, prompt: str, response: str, reference: str | None = None, **_: Any) -> float:
        import torch

        ids = self.tokenizer(prompt + response, return_tensors="pt", truncation=True, max_length=self.max_length)
        with self._lock, torch.no_grad():
            logits = self.model(**{k: v.to(self.device) for k, v in ids.items()}).logits[0].float()
        if logits.numel() == 1:
            return float(logits[0])
        return float(torch.softmax(logits, -1)[-1])
