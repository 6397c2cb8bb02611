"""``device_mapping``: a list of device ids, or ROLL's string form ``list(range(0,4))``.

ROLL ``eval``s that string, so a config file can run arbitrary code. roll parses it with
:mod:`ast` and accepts only what device lists are made of: integer literals, lists/tuples of them,
``range(...)`` (optionally wrapped in ``list(...)``) and ``+`` to concatenate. Everything else is
a clear error, never executed.
"""

from __future__ import annotations

import ast
from typing import Any

#: guard against ``range(10**9)``-style typos that would build an enormous list
MAX_DEVICES = 65536

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
        devices = [_as_device(v, value) for v in value]
    elif isinstance(value, int) and not isinstance(value, bool):
        devices = [_as_device(value, value)]
    else:
        raise DeviceMappingError(f"cannot use {value!r} as a device list; {EXAMPLES}")
    if not devices:
        raise DeviceMappingError(f"{value!r} names no devices; {EXAMPLES}, or leave it out to run on CPU")
    duplicates = sorted({d for d in devices if devices.count(d) > 1})
    if duplicates:
        raise DeviceMappingError(f"{value!r} lists device(s) {duplicates} more than once")
    return devices


def _as_device(item: Any, whole: Any) -> int:
    if isinstance(item, bool) or not isinstance(item, int) or item < 0:
        raise DeviceMappingError(f"{whole!r} contains {item!r}, which is not a device id (an integer >= 0)")
    return item


def _parse_string(text: str) -> list[int]:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise DeviceMappingError(f"cannot parse {text!r}; {EXAMPLES}") from None
    return _Walker(text).value(tree.body)


class _Walker:
    """Evaluates the tiny expression language of device lists over an AST, nothing more."""

    def __init__(self, text: str):
        self.text = text

    def fail(self, node: ast.AST) -> DeviceMappingError:
        snippet = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        return DeviceMappingError(
            f"{self.text!r} is not a device list: {snippet!r} is not allowed there (roll never evaluates "
            f"code in configs); {EXAMPLES}"
        )

    def value(self, node: ast.AST) -> list[int]:
        if isinstance(node, ast.List | ast.Tuple):
            return [self.integer(elt) for elt in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left) + self.value(node.right)
        if isinstance(node, ast.Call) and not node.keywords and isinstance(node.func, ast.Name):
            if node.func.id == "list" and len(node.args) == 1:
                return self.value(node.args[0])
            if node.func.id == "range" and 1 <= len(node.args) <= 3:
                bounds = range(*(self.integer(arg, allow_negative=True) for arg in node.args))
                if len(bounds) > MAX_DEVICES:
                    raise DeviceMappingError(f"{self.text!r} names {len(bounds)} devices; that cannot be right")
                return list(bounds)
        raise self.fail(node)

    def integer(self, node: ast.AST, *, allow_negative: bool = False) -> int:
        if (allow_negative and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                and isinstance(node.operand, ast.Constant)):
            return -self.integer(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        raise self.fail(node)
