"""Where a text can be cut into lines that tokenise independently, exactly.

Tokenising a turn's prompt is dominated by the tokenizer's pre-tokenizer regex (~230 ns per
character on a 2-core machine, docs/benchmarks.md section 1), and most lines of an env's
observation repeat from turn to turn (the instruction's last line, grid rows, "You have N actions
left."). :class:`~roll_core.chat.codec.ChatCodec` therefore encodes a new text line by line and
remembers each line's ids, but only for tokenizers where that is *provably* the same as encoding
the whole text. :func:`lines_tokenise_independently` says which; anything it does not recognise
is encoded whole.

Why a line start is a token boundary for the recognised tokenizers. Cut ``a + b`` where ``a`` ends
with ``\\n`` and ``b`` starts with a printable ASCII character ``x``:

* *Pre-tokenizer*: a ``Split`` (isolated) on one of :data:`LINE_SAFE_PATTERNS` (the GPT-4-style
  regex of Qwen2/2.5/3 and Llama 3), then byte-level mapping without a prefix space. No alternative
  of those regexes matches ``\\n`` followed by a non-space: letters may follow at most one
  non-newline character, ``[\\r\\n]*`` only ends a punctuation run, and the whitespace alternatives
  stop at ``x``. A match inside ``a`` ending at the cut is the same with or without ``b``: the
  only look-ahead, ``\\s+(?!\\S)``, is preceded by ``\\s*[\\r\\n]+``, which already takes a
  whitespace run that ends in ``\\n``. (GPT-2's own byte-level regex has no ``\\s*[\\r\\n]+`` and
  splits ``"a  \\nb"`` as ``"  "``, ``"\\n"``, but ``"a  \\n"`` alone as ``"  \\n"``: not safe.)
* *Normaliser*: none or NFC. An ASCII character never composes with what precedes it.
* *Model*: BPE without dropout, which encodes every pre-token on its own.
* *Added tokens*: none strips whitespace to its left, is matched as a single word, or contains a
  newline, so none can be cut by, or reach across, the line start.

The codec also checks a few adversarial texts once when it is built (:func:`probe`): a tokenizer
that passes the structural check but disagrees there is encoded whole.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: pre-tokenizer regexes for which a line start before a printable ASCII character is always a
#: pre-token boundary (argument in the module doc): Qwen2/2.5/3 and roll's tiny tokenizer, Llama 3
LINE_SAFE_PATTERNS = frozenset({
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
})

#: the cut points: after a newline, before a printable ASCII character
LINE_STARTS = re.compile(r"(?<=\n)(?=[!-~])")

#: texts whose line-by-line encoding must equal the whole one (white space before and after
#: newlines, punctuation runs ending in newlines, digits, letters with marks, special-looking text)
PROBES = (
    "a  \nb", "x.\n\ny", "x!\n \nz", "1\n2\n3", "'s\n's", "ünï\ncödé\n✓ ok\n", " \t\n\n(x)\n<answer>Up</answer>\n",
    "Turn 1. State:\n__O_\nP___\nYou have 10 actions left.\n",
)


def lines_tokenise_independently(fast: Any) -> bool:
    """Whether the Rust tokenizer ``fast`` encodes ``a + b`` as ``a``'s ids then ``b``'s whenever the
    cut is a line start before a printable ASCII character (module doc)."""
    try:
        pre = _state(fast.pre_tokenizer)
        norm = _state(fast.normalizer)
        model = fast.model
        added = fast.get_added_tokens_decoder().values()
    except Exception:  # not a tokenizers.Tokenizer, or one we cannot inspect
        return False
    if norm is not None and norm.get("type") != "NFC":
        return False
    if type(model).__name__ != "BPE" or getattr(model, "dropout", None):
        return False
    if not (pre and pre.get("type") == "Sequence" and len(pre.get("pretokenizers", ())) == 2):
        return False
    split, byte_level = pre["pretokenizers"]
    if not (split.get("type") == "Split" and split.get("behavior") == "Isolated" and not split.get("invert")
            and (split.get("pattern") or {}).get("Regex") in LINE_SAFE_PATTERNS):
        return False
    if not (byte_level.get("type") == "ByteLevel" and not byte_level.get("add_prefix_space")
            and not byte_level.get("use_regex")):
        return False
    return not any(t.lstrip or t.single_word or "\n" in t.content for t in added)


def probe(encode_whole: Any) -> bool:
    """Whether ``encode_whole`` (text -> ids) agrees with line-by-line encoding on :data:`PROBES`."""
    return all(encode_whole(text) == [i for line in split_lines(text) for i in encode_whole(line)] for text in PROBES)


def split_lines(text: str) -> list[str]:
    """``text`` cut at every line start before a printable ASCII character (the newline stays with
    the line it ends)."""
    return LINE_STARTS.split(text)


def _state(component: Any) -> dict | None:
    if component is None:
        return None
    return json.loads(component.__getstate__())
