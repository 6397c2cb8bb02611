"""The ``generative_reward_model`` reward: a causal LM is asked a question about the response, and
the score is how likely it is to answer with the positive verdict.

The question is a judge template (ROLL's ``judge_prompt``, as for ``llm_judge``; default
``yes_no``: "is the solution's final answer the reference's? Reply YES or NO") rendered with the
prompt, the response and the reference, sent as one user message through the model's chat
template. With the verdicts ``verdict_tokens = [positive, negative]`` (default ``["YES", "NO"]``)
the score is

    p(positive) / (p(positive) + p(negative)) = sigmoid(log p(positive) - log p(negative))

where ``log p(v)`` is the log-probability of verdict ``v``'s tokens as the first words of the
model's answer (the sum over its tokens, teacher-forced). It lies in (0, 1), is smooth in the
model's belief (not a sampled, parsed verdict: no ``judge_unparsable``, no sampling noise), and is
deterministic. To score from a generated and parsed verdict instead, use ``llm_judge`` with
``judge_model_type: inference``.

The model is ``model_args.model_name_or_path`` (any causal LM ``pretrain`` accepts; the built-in
``roll-tiny`` is one, built locally), loaded once by each rank of the domain's reward worker
group (always in workers: a model does not belong in the driver). ``model_args.dtype`` and
``strategy_args.strategy_config.device`` are read.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from roll_core.errors import ConfigError
from roll_core.rewards.judge import judge_template, render_judge_prompt
from roll_core.rewards.reward_model import model_settings, torch_dtype

#: the default verdicts: the yes_no template asks for exactly these words
DEFAULT_VERDICTS = ("YES", "NO")


def chat_prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as one user message through the tokenizer's chat template (with the assistant's
    turn opened), or as plain text for a tokenizer without one."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return list(tokenizer(text)["input_ids"])


class GenerativeReward:
    """``grm(prompt, response, reference) -> p(positive verdict)`` (see the module docstring)."""

    def __init__(self, model_dir: str, *, template: str, verdicts: Sequence[str] = DEFAULT_VERDICTS,
                 dtype: str | None = None, device: str | None = None, max_length: int = 4096):
        import torch
        from transformers import AutoModelForCausalLM

        from roll_core.models import load_tokenizer

        if len(verdicts) != 2 or not all(isinstance(v, str) and v for v in verdicts) or verdicts[0] == verdicts[1]:
            raise ConfigError(f"verdict_tokens must be two different non-empty words [positive, negative], got "
                              f"{list(verdicts)!r}")
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = load_tokenizer(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch_dtype(dtype))
        self.model.to(self.device).eval()
        self.template = template
        self.max_length = int(max_length)
        self.verdicts = [list(self.tokenizer.encode(v, add_special_tokens=False)) for v in verdicts]
        if not all(self.verdicts) or self.verdicts[0] == self.verdicts[1]:
            raise ConfigError(f"verdict_tokens {list(verdicts)!r} do not tokenize to two different token sequences "
                              f"with this model's tokenizer ({self.verdicts})")
        self._lock = threading.Lock()  # a reward worker scores several samples at once

    @classmethod
    def runs_in_workers(cls, section: Any) -> bool:
        return True

    @classmethod
    def from_reward_config(cls, section: Any, *, seed: int = 0, **_: Any) -> GenerativeReward:
        path, dtype, device = model_settings(section, "generative_reward_model",
                                             "a causal LM; roll-tiny is a tiny local one", seed=seed)
        template = judge_template(getattr(section, "judge_prompt", None) or "yes_no")
        verdicts = getattr(section, "verdict_tokens", None) or DEFAULT_VERDICTS
        return cls(path, template=template, verdicts=list(verdicts), dtype=dtype, device=device)

    def verdict_logprobs(self, prompt: str, response: str, reference: str | None = None) -> list[float]:
        """``[log p(positive), log p(negative)]`` as the start of the model's answer."""
        import torch

        question = chat_prompt_ids(self.tokenizer, render_judge_prompt(self.template, prompt, response, reference))
        longest = max(len(v) for v in self.verdicts)
        question = question[-(self.max_length - longest):]  # keep the end: where the question and the answer meet
        with self._lock, torch.no_grad():
            if longest == 1:  # one forward: the next-token distribution after the question
                logits = self.model(torch.tensor([question], device=self.device)).logits[0, -1].float()
                logp = torch.log_softmax(logits, -1)
                return [float(logp[v[0]]) for v in self.verdicts]
            out = []
            for verdict in self.verdicts:  # teacher-forced: each verdict token given the ones before it
                ids = torch.tensor([question + verdict], device=self.device)
                logp = torch.log_softmax(self.model(ids).logits[0].float(), -1)
                start = len(question) - 1
                out.append(float(sum(logp[start + k, t] for k, t in enumerate(verdict))))
            return out

    def __call__(self, prompt: str, response: str, reference: str | None = None, **_: Any) -> float:
        import math

        positive, negative = self.verdict_logprobs(prompt, response, reference)
        margin = positive - negative  # a sigmoid that cannot overflow either way
        return 1.0 / (1.0 + math.exp(-margin)) if margin >= 0 else math.exp(margin) / (1.0 + math.exp(margin))

