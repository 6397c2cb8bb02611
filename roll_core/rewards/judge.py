"""LLM-as-judge reward (ROLL's ``LLMJudgeRewardWorker`` fields): a judge model reads the prompt, the
response and the reference and answers a verdict, which is parsed into a score in [0, 1].

* ``judge_prompt``: the name of a built-in template (:data:`JUDGE_PROMPTS`; ROLL's name
  ``Qwen2.5-7B-Instruct-RLVR-prompt`` selects roll's yes/no template) or a template text with
  ``{question}`` (alias ``{prompt}``), ``{response}`` and ``{reference}``; unset: a 0-10 score template.
* ``judge_model_type``: ``api`` (the default, as in ROLL) posts the judge prompt as one user message
  to an OpenAI-compatible ``judge_api_url`` (a base URL such as ``http://host:8000/v1``) as
  ``judge_model_name``; ``inference`` generates with a judge model loaded in the domain's reward
  worker group (``model_args`` / ``strategy_args``: any installed inference strategy, e.g. ``hf_infer``).
* ``judge_api_key``: the bearer key; unset, the ``ROLL_JUDGE_API_KEY`` environment variable. It
  is never written to logs, errors, reprs or the saved config.

A verdict that does not parse (neither ``Score: x`` nor a yes/no) and a judge that cannot be
reached are :class:`~roll_core.rewards.failures.RewardFailure` s (score 0, counted as
``judge_unparsable`` / ``judge_unreachable``), not a guess: ROLL scores such a verdict 0 or 0.5
silently, which hides a broken judge.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from roll_core.errors import ConfigError
from roll_core.rewards.failures import RewardFailure

#: environment variable holding the judge's key when the config does not
API_KEY_ENV = "ROLL_JUDGE_API_KEY"
UNPARSABLE = "judge_unparsable"
UNREACHABLE = "judge_unreachable"

_YES_NO = """You are grading a solution against a reference answer.
Decide whether the final answer of the solution is the same as the reference answer (equal values,
equivalent expressions or the same option letter count as the same; the language does not matter).
An unclear or unfinished solution is not the same.
Reply with exactly one word: YES or NO.

Question:
{question}

Solution:
{response}

Reference answer:
{reference}

Verdict:"""

_SCORE_10 = """Rate the response to the question below from 0 (useless or wrong) to 10 (correct,
complete and clear), using the reference answer as the ground truth.
End your reply with a line of the form `Score: <number>`.

Question:
{question}

Response:
{response}

Reference answer:
{reference}"""

#: built-in judge templates by ``judge_prompt`` name (ROLL's RLVR name maps to the yes/no one)
JUDGE_PROMPTS: dict[str, str] = {
    "yes_no": _YES_NO,
    "score_10": _SCORE_10,
    "Qwen2.5-7B-Instruct-RLVR-prompt": _YES_NO,
}

_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)", re.IGNORECASE)
_WORD = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def judge_template(judge_prompt: str | None) -> str:
    """The template ``judge_prompt`` names (or is); checked so that a typo fails at startup."""
    if not judge_prompt:
        return _SCORE_10
    if judge_prompt in JUDGE_PROMPTS:
        return JUDGE_PROMPTS[judge_prompt]
    if "{response}" not in judge_prompt:
        raise ConfigError(f"judge_prompt {judge_prompt!r} is neither a built-in template "
                          f"({', '.join(JUDGE_PROMPTS)}) nor a template text with a {{response}} placeholder "
                          "(and {question} / {reference}).")
    return judge_prompt


def render_judge_prompt(template: str, prompt: str, response: str, reference: str | None) -> str:
    values = {"question": prompt, "prompt": prompt, "response": response, "reference": reference or ""}
    # only the three placeholders are filled; other braces in a template stay as written
    return re.sub(r"\{(question|prompt|response|reference)\}", lambda m: values[m.group(1)], template)


def parse_verdict(text: str) -> float:
    """``Score: x`` (0-10) -> x / 10 clipped to [0, 1]; else the first whole-word YES / NO -> 1 / 0."""
    text = text or ""
    scores = _SCORE.findall(text)
    if scores:
        return min(max(float(scores[-1]) / 10.0, 0.0), 1.0)
    word = _WORD.search(text)
    if word:
        return 1.0 if word.group(1).lower() == "yes" else 0.0
    shown = text.strip().replace("\n", " ")
    raise RewardFailure(UNPARSABLE, f"the judge's verdict has no score and no yes/no: {shown[:80]!r}")


class OpenAIJudgeClient:
    """POST ``{base_url}/chat/completions``; the key goes in the Authorization header only."""

    def __init__(self, base_url: str, model: str, api_key: str | None, *, timeout_s: float = 60.0,
                 attempts: int = 2, max_tokens: int | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._key = api_key
        self.timeout_s = float(timeout_s)
        self.attempts = max(1, int(attempts))
        self.max_tokens = max_tokens

    def __repr__(self) -> str:
        return f"OpenAIJudgeClient(url={self.url!r}, model={self.model!r}, key={'set' if self._key else 'unset'})"

    def __call__(self, text: str) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": text}],
                                "temperature": 0.0}
        if self.max_tokens:
            body["max_tokens"] = int(self.max_tokens)
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        last = ""
        for _ in range(self.attempts):
            request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                    payload = json.loads(reply.read().decode("utf-8"))
                return str(payload["choices"][0]["message"]["content"] or "")
            except urllib.error.HTTPError as exc:  # the status only: a server may echo request headers
                last = f"HTTP {exc.code} from {self.url}"
            except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                last = f"{type(exc).__name__} calling {self.url}"
        raise RewardFailure(UNREACHABLE, f"the judge at {self.url} gave no verdict ({last})")


class LLMJudge:
    """The ``llm_judge`` reward: ``judge(prompt, response, reference) -> score in [0, 1]``."""

    def __init__(self, template: str, ask: Callable[[str], str]):
        self.template = template
        self.ask = ask

    @classmethod
    def runs_in_workers(cls, section: Any) -> bool:
        """A judge model (``inference``) is loaded by the domain's reward workers; an API judge needs none."""
        return judge_model_type(section) == "inference"

    #: the reward worker hands a judge model's ``generate`` to :meth:`from_reward_config`
    needs_generator = runs_in_workers

    @classmethod
    def from_reward_config(cls, section: Any, *, seed: int = 0, generate: Callable[[str], str] | None = None,
                           **_: Any) -> LLMJudge:
        """``generate``: the reward worker's judge model (``judge_model_type: inference``)."""
        template = judge_template(getattr(section, "judge_prompt", None))
        kind = judge_model_type(section)
        if kind == "inference":
            if generate is None:
                raise ConfigError("judge_model_type 'inference' needs a judge model, which only the domain's "
                                  "reward worker group loads; this is a bug in the caller.")
            return cls(template, generate)
        url = getattr(section, "judge_api_url", None)
        if not url:
            raise ConfigError("judge_model_type 'api' needs judge_api_url (an OpenAI-compatible base URL, e.g. "
                              "http://localhost:8000/v1), or set judge_model_type: inference to load a judge "
                              "model in the reward workers.")
        timeout = float(getattr(section, "score_timeout", None) or 60.0)
        max_tokens = getattr(getattr(section, "generating_args", None), "max_new_tokens", None)
        return cls(template, OpenAIJudgeClient(url, getattr(section, "judge_model_name", None) or "judge",
                                               judge_api_key(section), timeout_s=timeout, max_tokens=max_tokens))

    def __call__(self, prompt: str, response: str, reference: str | None = None, **_: Any) -> float:
        return parse_verdict(self.ask(render_judge_prompt(self.template, prompt, response, reference)))


def judge_model_type(section: Any) -> str:
    kind = getattr(section, "judge_model_type", None) or "api"
    if kind not in ("api", "inference"):
        raise ConfigError(f"judge_model_type is {kind!r}; it is 'api' (an OpenAI-compatible judge_api_url) or "
                          "'inference' (a judge model in the reward workers), as in ROLL.")
    return kind


def judge_api_key(section: Any) -> str | None:
    """The config's key (a pydantic ``SecretStr`` or a string), else :data:`API_KEY_ENV`."""
    key = getattr(section, "judge_api_key", None)
    if key is not None and hasattr(key, "get_secret_value"):
        key = key.get_secret_value()
    return key or os.environ.get(API_KEY_ENV) or None
