"""``device_mapping``: a list of device ids, or ROLL's string form ``list(range(0,4))``.

ROLL ``eval``s that string, so a config file can run arbitrary code. roll parses it with
:mod:`ast` and accepts only what device lists are made of: integer literals, lists/tuples of them,
``range(...)`` (optionally wrapped in ``list(...)``) and ``+`` to concatenate. Everything else is
a clear error, never executed.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any

#: guard against ``range(10**9)``-style typos that would build an enormous list
MAX_DEVICES = 65536
#: longest device-mapping string parsed at all (``[0]+[1]+...`` chains of thousands of terms are refused
#: before :mod:`ast` recurses into them)
MAX_TEXT = 4096

EXAMPLES = "write a list like [0, 1, 2, 3] or the string 'list(range(0,4))'"


class DeviceMappingError(ValueError):
    """The value is not a device list; the message says what is accepted."""


def parse_device_mapping(value: Any) -> list[int] | None:
    """The device ids ``value`` denotes (``None`` stays ``None``: the worker runs on CPU)."""
    if value is None:
        return None
    if isinstance(value, str):
        devices = [_as_device(v, value) for v in _parse_string(value)]
    elif isinstance(value, list | tuple | range):
        if _count(value) > MAX_DEVICES:
            raise DeviceMappingError(f"the list names {_count(value)} devices (at most {MAX_DEVICES}); "
                                     "that cannot be right")
        devices = [_as_device(v, value) for v in value]
    elif isinstance(value, int) and not isinstance(value, bool):
        devices = [_as_device(value, value)]
    else:
        raise DeviceMappingError(f"cannot use {_short(repr(value))} as a device list; {EXAMPLES}")
    if not devices:
        raise DeviceMappingError(f"{_short(repr(value))} names no devices; {EXAMPLES}, or leave it out to run on CPU")
    duplicates = sorted(d for d, n in Counter(devices).items() if n > 1)
    if duplicates:
        raise DeviceMappingError(f"{_short(repr(value))} lists device(s) {duplicates[:8]} more than once")
    return devices


def _as_device(item: Any, whole: Any) -> int:
    if isinstance(item, bool) or not isinstance(item, int) or item < 0:
        raise DeviceMappingError(f"{_short(repr(whole))} contains {_short(repr(item))}, which is not a device id "
                                 "(an integer >= 0)")
    return item


def _parse_string(text: str) -> list[int]:
    if len(text) > MAX_TEXT:
        raise DeviceMappingError(f"the device_mapping string is {len(text)} characters long (at most {MAX_TEXT}); "
                                 f"{EXAMPLES}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise DeviceMappingError(f"cannot parse {_short(repr(text))}; {EXAMPLES}") from None
    except (RecursionError, MemoryError):
        raise DeviceMappingError(f"{_short(repr(text))} is nested too deeply to be a device list; {EXAMPLES}") from None
    return _Walker(text).value(tree.body)


def _count(values: list | tuple | range) -> int:
    """``len(values)``, also for a ``range`` too long for ``len`` (``range(10**26)`` overflows it)."""
    if isinstance(values, range):
        step = values.step
        return max(0, (values.stop - values.start + step - (1 if step > 0 else -1)) // step)
    return len(values)


def _short(text: str, limit: int = 80) -> str:
    """``text`` cut to ``limit`` characters, for messages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Walker:
    """Evaluates the tiny expression language of device lists over an AST, nothing more."""

    def __init__(self, text: str):
        self.text = text

    def fail(self, node: ast.AST) -> DeviceMappingError:
        snippet = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        return DeviceMappingError(
            f"{_short(repr(self.text))} is not a device list: {snippet!r} is not allowed there (roll never evaluates "
            f"code in configs); {EXAMPLES}"
        )

    def value(self, node: ast.AST) -> list[int]:
        """The devices of ``node``; ``a + b + c`` chains are walked in a loop, not recursively."""
        terms = []
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            terms.append(node.right)
            node = node.left
        terms.append(node)
        devices: list[int] = []
        for term in reversed(terms):
            devices += self.term(term)
            if len(devices) > MAX_DEVICES:
                raise self.too_many(len(devices))
        return devices

    def term(self, node: ast.AST) -> list[int]:
        if isinstance(node, ast.List | ast.Tuple):
            return [self.integer(elt) for elt in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node)
        if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, ast.Name):
            if node.func.id == "list" and len(node.args) == 1:
                return self.value(node.args[0])
            if node.func.id == "range" and 1 <= len(node.args) <= 3:
                args = [self.integer(arg, allow_negative=True) for arg in node.args]
                if len(args) == 3 and args[2] == 0:
                    raise self.fail(node)
                bounds = range(*args)
                count = _count(bounds)
                if count > MAX_DEVICES:
                    raise self.too_many(count)
                return list(bounds)
        raise self.fail(node)

    def too_many(self, count: int) -> DeviceMappingError:
        return DeviceMappingError(f"{_short(repr(self.text))} names {count} devices (at most {MAX_DEVICES}); "
                                  "that cannot be right")

    def integer(self, node: ast.AST, *, allow_negative: bool = False) -> int:
        if (allow_negative and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant)):
            return -self.integer(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        raise self.fail(node)
