"""``check_grid_tokens``: does a text grid keep its shape once tokenized?

A small model reads a grid observation (FrozenLake, Sokoban) through its tokens. When every cell is
one token and every row break one more, the cell below another is always the same number of tokens
further on, a fixed offset attention can learn. A BPE tokenizer can break that silently: the tiny
tokenizer merges a punctuation cell with the newline after it (``" _\\n"`` is one token, ``" O\\n"``
two), so rows ending in ice were one token shorter than rows ending in a hole, and the offset of
"below" depended on the map. The FrozenLake demo ran like that until 2026-11-28 (docs/learning.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ROW_BREAK = "\n"


class GridTokensError(AssertionError):
    """A grid whose tokens do not keep its shape; the message names the offending tokens."""


def split_row(row: str, symbols: Iterable[str]) -> list[str]:
    """``row`` as a list of cell symbols (longest match first); raises ValueError on text no symbol covers."""
    ordered = sorted(set(symbols), key=len, reverse=True)
    cells, at = [], 0
    while at < len(row):
        symbol = next((s for s in ordered if s and row.startswith(s, at)), None)
        if symbol is None:
            raise ValueError(f"row {row!r} has {row[at:]!r} at column {at}, which is none of the symbols {ordered}")
        cells.append(symbol)
        at += len(symbol)
    return cells


def check_grid_tokens(tokenizer: Any, text: str, symbols: Iterable[str], *, row_break: str = ROW_BREAK) -> None:
    """Raise :class:`GridTokensError` unless every row of ``text`` takes the same number of tokens,
    each token one cell, one row break, or a row's last cell with its break.

    ``symbols`` are the env's cell symbols (its ``grid_lookup`` values); ``tokenizer`` is a Hugging
    Face (fast) tokenizer. A last cell merged with the break keeps the shape when every row ends
    that way (Sokoban's wall, ``" #\\n"``), and breaks it when only some rows do.
    """
    allowed: dict[tuple[int, int], int] = {}  # (start, end) of every span a token may cover -> its row
    at = 0
    rows = text.split(row_break)
    for r, row in enumerate(rows):
        cells = split_row(row, symbols)
        for c, cell in enumerate(cells):
            allowed[(at, at + len(cell))] = r
            if c == len(cells) - 1 and r < len(rows) - 1:
                allowed[(at, at + len(cell) + len(row_break))] = r
            at += len(cell)
        if r < len(rows) - 1:
            allowed[(at, at + len(row_break))] = r
            at += len(row_break)
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    problems = list(dict.fromkeys(repr(text[a:b]) for a, b in offsets if (a, b) not in allowed))
    per_row = [0] * len(rows)
    for span in offsets:
        if span in allowed:
            per_row[allowed[span]] += 1
    if not problems and len(set(per_row[:-1])) <= 1 and per_row[0] - per_row[-1] in (0, 1):
        return
    why = (f"tokens that are not one cell: {', '.join(problems[:5])}" if problems else
           f"rows take {', '.join(map(str, per_row))} tokens (a last cell merged with the row break in some "
           "rows only, or rows of different lengths)")
    raise GridTokensError(
        f"the grid does not keep its shape in tokens: {why}. Use cell symbols the tokenizer keeps apart "
        "from each other and from the row break (a letter such as ' F', or ' -'), so the cell below another "
        "is always the same number of tokens on.")
