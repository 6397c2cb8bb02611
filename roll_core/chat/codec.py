"""Chat-template rendering and tokenisation, as the rollout engine needs them.

The engine works token-in/token-out: generated ids are kept as generated, and only the text that
the chat template adds between turns (end of turn, the next observation, the generation prompt)
is tokenised. :class:`ChatCodec` wraps a Hugging Face tokenizer with exactly those operations.
It imports transformers lazily and never torch, so env-manager actors stay light.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from roll_core.chat.line_split import lines_tokenise_independently, probe, split_lines

Message = dict[str, Any]

#: texts (and rendered conversations) a codec remembers; the oldest is forgotten first
CACHE_SIZE = 512
#: lines a codec remembers (tokenizers whose lines tokenise independently, roll_core.chat.line_split)
LINE_CACHE_SIZE = 4096
#: texts longer than this are tokenised with the GIL released (a thread tokenising a large agent
#: request then leaves the event loop of its worker free)
LONG_TEXT = 20_000


class ChatCodec:
    """Renders chat messages with the tokenizer's template and maps text <-> token ids."""

    def __init__(self, tokenizer: Any):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"the tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat template; "
                "multi-turn rollouts need one (set tokenizer.chat_template)"
            )
        self.tokenizer = tokenizer
        self.eos_token_id: int | None = tokenizer.eos_token_id
        self.pad_token_id: int = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (self.eos_token_id or 0)
        )
        #: what the engine appends to a response that has no end-of-turn token of its own
        self.end_of_turn_ids: list[int] = [] if self.eos_token_id is None else [self.eos_token_id]
        self.special_ids = frozenset(tokenizer.all_special_ids)
        # the Rust tokenizer encodes ~4x faster than the Python wrapper; same ids
        self._fast = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
        # decoding through it is the wrapper's decode whenever the wrapper adds no clean-up of its own
        self._fast_decode = self._fast is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False)
        self._encoded: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._rendered: OrderedDict[tuple, str] = OrderedDict()
        self._lines: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        #: encode a new text line by line, remembering each line (exact only for some tokenizers)
        self.by_line = (self._fast is not None and lines_tokenise_independently(self._fast)
                        and probe(lambda text: list(self._encode_whole(text))))

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool,
               tools: Sequence[dict] | None = None) -> str:
        """The template's text of ``messages``; ``tools`` (OpenAI function specs) are rendered by the
        template itself, as the model was trained to see them. Plain-text conversations without tools
        are remembered for the last few hundred renders (the members of a group render the same
        first turns; jinja's set-up is most of a render)."""
        key = None
        if not tools:
            try:
                key = (add_generation_prompt, *(tuple(m.items()) for m in messages))
                hash(key)
            except (TypeError, AttributeError):  # content that is not plain text: render every time
                key = None
        text = self._rendered.get(key) if key is not None else None
        if text is None:
            text = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
                **({"tools": list(tools)} if tools else {}),
            )
            if key is not None:
                _remember(self._rendered, key, text)
        return text

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added), remembered for the last few hundred texts.

        Why a cache: tokenising is the largest CPU cost of an env loop, and the same texts come back
        all the time: the members of a group start from one instance, so their first prompts (the
        system message with the env's instruction, the first observation) are identical, later
        turns often are too, and a model-free policy answers with a handful of action texts.
        """
        if not text:
            return []
        ids = self._encoded.get(text)
        if ids is None:
            if self.by_line and "\n" in text and len(text) <= LONG_TEXT:
                ids = tuple(i for line in split_lines(text) for i in self._encode_line(line))
            else:
                ids = self._encode_whole(text)
            _remember(self._encoded, text, ids)
        return list(ids)

    def _encode_line(self, line: str) -> tuple[int, ...]:
        """A line's ids, remembered: a new turn's text is mostly lines seen before (the instruction's
        last line, grid rows, counters), so only its new lines meet the pre-tokenizer."""
        ids = self._lines.get(line)
        if ids is None:
            ids = self._encode_whole(line)
            _remember(self._lines, line, ids, LINE_CACHE_SIZE)
        return ids

    def _encode_whole(self, text: str) -> tuple[int, ...]:
        if self._fast is not None and len(text) > LONG_TEXT:  # tokenizers' batch call releases the GIL
            return tuple(self._fast.encode_batch([text], add_special_tokens=False)[0].ids)
        if self._fast is not None:
            return tuple(self._fast.encode(text, add_special_tokens=False).ids)
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        if self._fast_decode:
            return self._fast.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def response_texts(self, ids: Sequence[int]) -> tuple[str, str]:
        """``(full text, env text)`` of a response: its decoding, and that without trailing stop tokens.

        Only trailing special tokens are cut (not ``skip_special_tokens``): tokenizers that mark
        action tags such as ``<answer>`` as special would otherwise hide the action from the env.
        """
        end = len(ids)
        while end and ids[end - 1] in self.special_ids:
            end -= 1
        body = self.decode(ids[:end])
        return (body + self.decode(ids[end:]) if end < len(ids) else body), body

    def response_text(self, ids: Sequence[int]) -> str:
        return self.response_texts(ids)[1]

    def ends_turn(self, ids: Sequence[int]) -> bool:
        """Whether a response ends with a special (stop) token, i.e. closed its turn itself."""
        return bool(ids) and ids[-1] in self.special_ids


def load_tokenizer(source: Any) -> Any:
    """A tokenizer from a tokenizer object (returned as is) or a model directory / hub id."""
    if not isinstance(source, str):
        return source
    from roll_core.models import load_tokenizer as load_model_tokenizer

    return load_model_tokenizer(source)


def _remember(cache: OrderedDict, key: Any, value: Any, size: int | None = None) -> None:
    """Add ``key`` to a bounded cache, dropping the oldest entry once it holds ``size`` (default
    :data:`CACHE_SIZE`)."""
    cache[key] = value
    if len(cache) > (CACHE_SIZE if size is None else size):
        try:
            cache.popitem(last=False)
        except KeyError:  # another thread emptied it meanwhile
            pass
