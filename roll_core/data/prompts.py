"""RLVR prompts: read JSON lines, render them with a chat template, tag each with its reward domain.

Columns follow ROLL's ``data_args``: the prompt is ``data_args.messages`` (a list of chat
messages) or ``data_args.prompt`` (a string, sent as one user message); when neither is set, a
row's ``messages`` or ``prompt`` key is used. The reference answer is ``data_args.response``
(``solution``), falling back to ``ground_truth`` and ``answer``. The domain that scores a row is
found from its ``domain`` key or its tag (``data_args.tag``): a ``rewards`` key, or a tag listed in
some domain's ``tag_included``; with a single domain and no tags, every row belongs to it.

Prompts longer than ``prompt_length`` tokens are left out (as ROLL filters them), with a count in
the log; a dataset with nothing left is an error that says which limit to raise.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from roll_core.errors import ConfigError, did_you_mean

logger = logging.getLogger("roll.data")

Messages = list[dict[str, str]]
#: reference-answer columns tried after ``data_args.response``
REFERENCE_FALLBACKS = ("ground_truth", "answer")


@dataclass(frozen=True)
class PromptRow:
    """One tokenised prompt of the dataset."""

    index: int  # position in the loaded dataset (after filtering)
    prompt_ids: tuple[int, ...]
    text: str  # the user-facing prompt (last user message), what reward functions receive
    reference: str | None
    domain: str
    tag: str | None = None
    #: the row's other columns (e.g. ROLL's code ``test_cases``), for reward functions that take ``row``
    fields: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _render_native(tokenizer: Any, messages: Messages) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"data_args.template asks for the tokenizer's chat template, but the tokenizer of "
            f"{getattr(tokenizer, 'name_or_path', '?')!r} has none; use `template: plain` for a base model."
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _render_plain(tokenizer: Any, messages: Messages) -> str:
    return "\n".join(m["content"] for m in messages)


#: ``data_args.template`` -> renderer. roll renders with the model's own tokenizer template, so
#: ROLL's model-family template names select it too (they name the template that model ships).
TEMPLATES: dict[str, Callable[[Any, Messages], str]] = {
    "native": _render_native,
    "plain": _render_plain,
    **dict.fromkeys(("chatml", "qwen2", "qwen2_5", "qwen2_5_vl", "qwen3", "llama3", "deepseek", "default"),
                    _render_native),
}


def renderer(template: str | None, key: str = "data_args.template") -> Callable[[Any, Messages], str]:
    """The renderer ``template`` names (None: ``native``); ``key`` is the config key in the error."""
    name = template or "native"
    if name not in TEMPLATES:
        raise ConfigError(
            f"{key} is {name!r}, which roll does not know (known: {', '.join(TEMPLATES)})."
            f"{did_you_mean(name, TEMPLATES)} `native` renders with the model tokenizer's chat template."
        )
    return TEMPLATES[name]


#: data_args.dataset_type values roll reads (ROLL's "json" files are JSON lines)
DATASET_TYPES = ("json", "jsonl")


def check_dataset_type(dataset_type: str | Sequence[str] | None) -> None:
    """Refuse a dataset type roll cannot read, instead of reading the file as JSON lines anyway."""
    for kind in [dataset_type] if isinstance(dataset_type, str) or dataset_type is None else dataset_type:
        if kind is not None and kind not in DATASET_TYPES:
            raise ConfigError(f"data_args.dataset_type {kind!r} is not supported: roll reads JSON-lines files "
                              f"({' or '.join(DATASET_TYPES)}); convert the data, e.g. with pandas' to_json(lines=True).")


def resolve_path(path: str) -> str:
    """``path`` as given (relative to the working directory, as ROLL reads it), checked to exist."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise ConfigError(
            f"data file {path!r} does not exist (looked for {full}); data_args.file_name paths are relative "
            "to the directory `roll run` is started in."
        )
    return full


def read_jsonl(paths: str | Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """Rows of JSON-lines files as ``("file:line", row)``; a bad line is an error naming it."""
    rows = []
    for path in [paths] if isinstance(paths, str) else list(paths):
        full = resolve_path(path)
        with open(full, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{where} is not valid JSON ({exc.msg}); every line must be one object.") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{where} is a JSON {type(row).__name__}, not an object.")
                rows.append((where, row))
    if not rows:
        raise ConfigError(f"the data files {paths!r} hold no rows.")
    return rows


def domain_table(rewards: Mapping[str, Any]) -> dict[str, str]:
    """tag -> domain from each domain's ``tag_included`` (a tag in two domains is an error)."""
    table: dict[str, str] = {}
    for domain, reward in rewards.items():
        for tag in getattr(reward, "tag_included", None) or ():
            if tag in table and table[tag] != domain:
                raise ConfigError(f"tag {tag!r} is in rewards.{table[tag]}.tag_included and in "
                                  f"rewards.{domain}.tag_included; a tag is scored by one domain.")
            table[tag] = domain
    return table


def domain_of(row: Mapping[str, Any], rewards: Mapping[str, Any], tags: Mapping[str, str], *,
              tag_key: str | None, where: str) -> tuple[str, str | None]:
    """The reward domain of ``row`` and its tag (see the module docstring)."""
    tag = row.get(tag_key) if tag_key else None
    for value in (row.get("domain"), tag):
        if value is None:
            continue
        if value in rewards:
            return str(value), tag
        if value in tags:
            return tags[value], tag
    if len(rewards) == 1 and row.get("domain") is None and tag is None:
        return next(iter(rewards)), None
    shown = row.get("domain") if row.get("domain") is not None else tag
    raise ConfigError(
        f"{where}: domain/tag {shown!r} belongs to no reward domain (rewards: {', '.join(rewards)}; tags: "
        f"{', '.join(tags) or 'none'}).{did_you_mean(str(shown), [*rewards, *tags])} Add it to a domain's "
        "tag_included, or add a rewards entry for it."
    )


def _messages(row: Mapping[str, Any], data_args: Any, where: str) -> Messages:
    key = data_args.messages or data_args.prompt or ("messages" if "messages" in row else "prompt")
    if key not in row:
        raise ConfigError(f"{where} has no {key!r} column (keys: {', '.join(row)}); set data_args.prompt or "
                          "data_args.messages to the column holding the prompt.")
    value = row[key]
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        return [{"role": str(m.get("role", "user")), "content": str(m["content"])} for m in value]
    raise ConfigError(f"{where}: column {key!r} must be a string or a list of {{role, content}} messages.")


def _reference(row: Mapping[str, Any], data_args: Any) -> str | None:
    for key in (data_args.response, *REFERENCE_FALLBACKS):
        if key and row.get(key) is not None:
            return str(row[key])
    return None


def _fields(row: Mapping[str, Any], data_args: Any) -> dict[str, Any]:
    """The row minus its prompt (kept once, as tokens and text)."""
    prompt_keys = {data_args.messages, data_args.prompt, "messages", "prompt"}
    return {k: v for k, v in row.items() if k not in prompt_keys}


def load_prompts(paths: str | Sequence[str], tokenizer: Any, *, data_args: Any, rewards: Mapping[str, Any],
                 prompt_length: int | None, template: str | None = None) -> list[PromptRow]:
    """Read, render, tokenise, tag and length-filter the prompts of ``paths``."""
    check_dataset_type(data_args.dataset_type)
    render = renderer(template or data_args.template)
    tags = domain_table(rewards)
    rows: list[PromptRow] = []
    too_long = 0
    longest = 0
    for where, raw in read_jsonl(paths):
        messages = _messages(raw, data_args, where)
        domain, tag = domain_of(raw, rewards, tags, tag_key=data_args.tag, where=where)
        ids = tokenizer.encode(render(tokenizer, messages), add_special_tokens=False)
        if prompt_length is not None and len(ids) > prompt_length:
            too_long += 1
            longest = max(longest, len(ids))
            continue
        user = [m["content"] for m in messages if m["role"] == "user"]
        rows.append(PromptRow(len(rows), tuple(ids), user[-1] if user else messages[-1]["content"],
                              _reference(raw, data_args), domain, None if tag is None else str(tag),
                              _fields(raw, data_args)))
    if too_long:
        logger.warning("%d prompt(s) of %s are longer than prompt_length (%s tokens) and are left out",
                       too_long, paths, prompt_length)
    if not rows:
        raise ConfigError(f"every prompt of {paths!r} is longer than prompt_length ({prompt_length} tokens; the "
                          f"longest has {longest}); raise prompt_length.")
    return rows


class PromptSampler:
    """Batches of prompts: shuffled passes over the data, per domain when ``domain_interleave_probs`` is set.

    A batch's domains are drawn with those probabilities; inside a domain, rows come from a seeded
    shuffle, reshuffled every pass. The state is a few counters, saved with checkpoints so that a
    resumed run draws the same batches.
    """

    def __init__(self, rows: Sequence[PromptRow], *, seed: int, probs: Mapping[str, float] | None = None):
        self.seed = int(seed)
        self.streams: dict[str, list[PromptRow]] = {}
        if probs:
            present = {r.domain for r in rows}
            missing = [d for d, p in probs.items() if p > 0 and d not in present]
            if missing:
                raise ConfigError(f"actor_train.data_args.domain_interleave_probs names {missing}, which have no "
                                  f"rows in the data (domains present: {sorted(present)}).")
            for domain in probs:
                self.streams[domain] = [r for r in rows if r.domain == domain]
            self.probs = {d: float(p) for d, p in probs.items() if p > 0}
        else:
            self.streams["*"] = list(rows)
            self.probs = {"*": 1.0}
        self.drawn = dict.fromkeys(self.streams, 0)
        self.batches = 0

    def _take(self, stream: str) -> PromptRow:
        rows = self.streams[stream]
        count = self.drawn[stream]
        epoch, pos = divmod(count, len(rows))
        order = list(range(len(rows)))
        random.Random(f"{self.seed}/{stream}/{epoch}").shuffle(order)
        self.drawn[stream] = count + 1
        return rows[order[pos]]

    def sample(self, size: int) -> list[PromptRow]:
        rng = random.Random(f"{self.seed}/batch/{self.batches}")
        names = list(self.probs)
        picks = rng.choices(names, weights=[self.probs[n] for n in names], k=size) if len(names) > 1 else names * size
        self.batches += 1
        return [self._take(name) for name in sorted(picks, key=names.index)]

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": dict(self.drawn), "batches": self.batches}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.drawn.update({k: int(v) for k, v in state.get("drawn", {}).items() if k in self.drawn})
        self.batches = int(state.get("batches", 0))
