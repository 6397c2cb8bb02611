"""The built-in tiny tokenizer: a small byte-level BPE with a ChatML chat template.

Why byte-level BPE: every string encodes (no unknown token), so any env text or model output
round-trips exactly, while the merges learnt on a corpus of env-like texts (grids, action words,
``<answer>`` tags, arithmetic, shop actions; ``tiny_corpus.yaml``) keep prompts short.

The pipeline is exactly Qwen2's (NFC, Qwen's pre-tokenisation regex, which puts every digit in
its own token, then byte-level BPE). That is not a matter of taste: the tiny model is a Qwen2
model, and transformers 5's ``AutoTokenizer`` loads every ``model_type: qwen2`` directory with
``Qwen2Tokenizer``, which rebuilds that pipeline around the saved vocabulary and merges. Training
under the same pipeline makes the tokenizer we build and the one everybody loads identical (a
test pins it).

The training is deterministic (fixed corpus, fixed trainer settings), so two builds give the same
``tokenizer.json``; a test pins this. Changing the corpus or the settings below changes every
tiny model built from it: bump :data:`roll_core.models.tiny.TOKENIZER_VERSION`.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

#: Special tokens, in id order: pad (id 0), the ChatML turn delimiters; ``<|im_end|>`` is eos.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)
#: Tags that env prompts and answers use all the time: always one token each (not "special":
#: they decode as text, so ``skip_special_tokens`` never drops them).
TAG_TOKENS = ("<answer>", "</answer>", "<think>", "</think>")
DEFAULT_VOCAB_SIZE = 2048


def chat_template() -> str:
    """ChatML (``<|im_start|>role\\ncontent<|im_end|>\\n``) with ``add_generation_prompt``.

    With ``tools`` it renders them Hermes/Qwen-style (a system block listing the function specs,
    assistant tool calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, tool results
    as ``tool`` turns), so the agent gateway can serve tool-using agents; chats without tools render
    exactly as plain ChatML.
    """
    return resources.files("roll_core.models").joinpath("chatml.jinja").read_text(encoding="utf-8")


def corpus_texts() -> list[str]:
    """The texts the BPE merges are learnt from (package data)."""
    import yaml

    raw = resources.files("roll_core.models").joinpath("tiny_corpus.yaml").read_text(encoding="utf-8")
    return [str(t) for t in yaml.safe_load(raw)["texts"]]


def build_tiny_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, texts: list[str] | None = None) -> Any:
    """Train the tiny tokenizer and wrap it as a ``PreTrainedTokenizerFast``.

    Save it with ``save_pretrained(dir)``; load it back with ``AutoTokenizer.from_pretrained(dir)``.
    The vocabulary may come out smaller than ``vocab_size`` when the corpus runs out of merges.
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    texts = corpus_texts() if texts is None else texts
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    # the tags take ids right after the specials and stay out of the merges; re-adding them
    # after training marks them non-special
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS + TAG_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        chat_template=chat_template(),
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
