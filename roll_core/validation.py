"""Turning pydantic's validation errors into one-paragraph messages with YAML paths.

A user sees ``actor_train.training_args.learning_rat: unknown key. Did you mean 'learning_rate'?``
instead of a pydantic traceback. The path and the expected type come from walking the model
classes along the error's location, so the messages stay right as the schema grows.
"""

from __future__ import annotations

import types
import typing
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from roll_core.errors import ConfigError, did_you_mean

#: at most this many problems are listed in one message
MAX_PROBLEMS = 12


class ConfigWarning(UserWarning):
    """The config is valid but probably not what was meant (printed by the CLI as a warning)."""


def warn(message: str) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=3)


def format_path(parts: Iterable[str | int]) -> str:
    """``('a', 'b', 0, 'c')`` -> ``a.b[0].c``."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def problems_message(problems: Sequence[str], source: str | None = None) -> str:
    """One paragraph listing every problem (capped), naming the config source when known."""
    where = f" {source}" if source else ""
    shown = [p.rstrip(".") for p in problems[:MAX_PROBLEMS]]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"and {len(problems) - MAX_PROBLEMS} more")
    if len(problems) == 1:
        return _sentence(f"Invalid config{where}: {shown[0]}")
    return _sentence(f"Invalid config{where} ({len(problems)} problems): " + "; ".join(shown))


def _sentence(text: str) -> str:
    return text if text.endswith((".", "?", "!")) else text + "."


def config_error(exc: ValidationError, model: type[BaseModel], *, source: str | None = None,
                 prefix: Sequence[str | int] = (),
                 extra_hint: Callable[[tuple[str | int, ...], str], str] | None = None) -> ConfigError:
    """A :class:`ConfigError` describing every error of ``exc`` (raised validating ``model``).

    ``prefix`` is prepended to every path (for a section validated on its own, like an
    ``env_config``); ``extra_hint(path, key)`` may add a sentence to an unknown-key problem.
    """
    problems: list[str] = []
    for err in exc.errors():
        text = _problem(err, model, tuple(prefix), extra_hint)
        if text not in problems:  # one per path for union members failing alike
            problems.append(text)
    return ConfigError(problems_message(problems, source))


# -- walking the schema ---------------------------------------------------------------------------

def unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and a ``None`` member of a union (``X | None`` -> ``X``)."""
    while get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    if _is_union(tp):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return unwrap(members[0])
    return tp


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def walk(model: type[BaseModel], loc: Sequence[str | int]) -> tuple[list[str | int], Any, Any]:
    """Follow ``loc`` through the schema: (the part that exists, its type, the model owning it).

    Stops at the first segment the schema does not know: an unknown key, or pydantic's tag of a
    union member. The owner is the model class in which the last segment was looked up.
    """
    tp: Any = model
    owner: Any = model
    path: list[str | int] = []
    for seg in loc:
        current = unwrap(tp)
        origin = get_origin(current)
        if is_model(current):
            if not (isinstance(seg, str) and seg in current.model_fields):
                owner = current
                break
            owner, tp = current, current.model_fields[seg].annotation
        elif origin in (dict, Mapping) or current is dict:
            args = get_args(current)
            tp = args[1] if len(args) == 2 else Any
        elif origin in (list, tuple, Sequence) and isinstance(seg, int):
            tp = (get_args(current) or (Any,))[0]
        else:
            break
        path.append(seg)
    return path, tp, owner


def describe(tp: Any) -> str:
    """How a type reads in an error message: ``an integer``, ``one of 'a', 'b'``, ``a list of strings``."""
    while get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    if _is_union(tp):
        members = get_args(tp)
        names = [describe(a) for a in members if a is not type(None)]
        return " or ".join(names) + (" (or null)" if type(None) in members else "")
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(v) for v in get_args(tp))
    origin = get_origin(tp) or tp
    if origin in (list, tuple, Sequence):
        item = (get_args(tp) or (Any,))[0]
        return f"a list of {_PLURALS.get(item, 'values')}"
    if origin in (dict, Mapping) or is_model(tp):
        return "a mapping"
    return _SINGULARS.get(tp, "a value")


_SINGULARS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
              type(None): "null", Any: "any value"}
_PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


# -- one problem ------------------------------------------------------------------------------

_TYPE_ERRORS = ("_type", "_parsing", "int_from_float", "bool_parsing", "literal_error", "model_attributes_type")


def _problem(err: Mapping[str, Any], model: type[BaseModel], prefix: tuple[str | int, ...],
             extra_hint: Callable[[tuple[str | int, ...], str], str] | None) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    path, tp, owner = walk(model, loc)
    where = format_path(prefix + tuple(path))
    value = _short(err.get("input"))
    if kind == "extra_forbidden":
        key = str(loc[len(path)]) if len(path) < len(loc) else str(loc[-1])
        full = format_path(prefix + tuple(path) + (key,))
        choices = list(owner.model_fields) if is_model(owner) else []
        hint = extra_hint(prefix + tuple(path), key) if extra_hint else ""
        return f"{full}: unknown key.{did_you_mean(key, choices)}{hint}"
    if kind == "missing":
        return f"{where} is required ({describe(tp)})"
    if kind == "frozen_instance":  # a validator assigned to a field of a frozen model
        return (f"{where}: a validator of {getattr(owner, '__name__', 'the config')} assigned to it, but configs "
                "are frozen (Instance is frozen); return the normalised value from a field_validator, or edit "
                "the input in a model_validator(mode='before') (see roll_core.envs.EnvConfig)")
    if kind in ("value_error", "assertion_error"):
        message = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return f"{where}: {message}" if where else message
    if kind == "literal_error":
        choices = [str(v) for v in get_args(unwrap(tp))] if get_origin(unwrap(tp)) is Literal else []
        return f"{where} must be {describe(tp)}, got {value}.{did_you_mean(str(err.get('input')), choices)}"
    if kind.endswith(_TYPE_ERRORS):
        return f"{where} expects {describe(tp)}, got {value}"
    message = err["msg"].replace("Input should be", "should be")
    return f"{where} {message}, got {value}"


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
