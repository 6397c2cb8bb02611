"""The base every config section derives from, and small field helpers shared by all sections.

Every section forbids unknown keys (ROLL silently drops them, which hides typos) and is frozen once
validated, so a config object can be handed to any worker without fear of it changing underneath.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

#: prefix of the description of fields roll accepts only so that ROLL configs load unchanged
COMPAT = "Accepted for ROLL compatibility; roll does not use it."


class RollModel(BaseModel):
    """A config section: unknown keys are errors, values are immutable after validation."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,  # `exp_name: 2024` or `system_envs: {X: 1}` are fine in YAML
    )

    @model_validator(mode="after")
    def _fixed_fields_keep_their_value(self):
        for name, field in type(self).model_fields.items():
            if _extra(field).get("roll_fixed") and getattr(self, name) != field.default:
                raise ValueError(f"{name} is {getattr(self, name)!r}, but roll supports only {field.default!r}: "
                                 f"{_extra(field)['why']}")
        return self


def compat(default: Any = None, note: str = "", **kwargs: Any) -> Any:
    """A field kept only so ROLL configs validate; its description and JSON schema say so."""
    return Field(default, description=f"{COMPAT} {note}".strip(), json_schema_extra={"roll_compat": True},
                 **kwargs)


def fixed(default: Any, why: str, **kwargs: Any) -> Any:
    """A ROLL field roll supports with one value only: any other value is refused at validation."""
    return Field(default, description=f"Only {default!r} is supported: {why}",
                 json_schema_extra={"roll_fixed": True, "why": why}, **kwargs)


def _extra(field: Any) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def is_compat(field: Any) -> bool:
    """Whether a pydantic ``FieldInfo`` was declared with :func:`compat`."""
    return bool(_extra(field).get("roll_compat"))


def is_fixed(field: Any) -> bool:
    """Whether a pydantic ``FieldInfo`` was declared with :func:`fixed` (other values are refused)."""
    return bool(_extra(field).get("roll_fixed"))


def compat_warnings(model: BaseModel, path: str = "") -> list[str]:
    """One line per compatibility field a config sets to something other than its default.

    Fields left at their defaults (or written out with the default value, as ROLL's example
    configs do) are quiet; a value that would change ROLL's behaviour says that roll ignores it.
    """
    lines = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        where = f"{path}.{name}" if path else name
        if is_compat(field):
            if name in model.model_fields_set and value != field.get_default(call_default_factory=True):
                note = (field.description or "").removeprefix(COMPAT).strip()
                lines.append(f"{where} ({value!r}) is accepted for ROLL compatibility and has no effect in roll"
                             + (f": {note}" if note else "."))
            continue
        for key, item in _children(value):
            lines += compat_warnings(item, f"{where}{key}")
    return lines


def _children(value: Any) -> list[tuple[str, BaseModel]]:
    if isinstance(value, BaseModel):
        return [("", value)]
    if isinstance(value, dict):
        return [(f".{k}", v) for k, v in value.items() if isinstance(v, BaseModel)]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(value) if isinstance(v, BaseModel)]
    return []


def _none_string(value: Any) -> Any:
    """ROLL users write ``None`` in YAML (a string there) where they mean null."""
    if isinstance(value, str) and value.strip().lower() in {"none", "null", "~", ""}:
        return None
    return value


def _empty_dict(value: Any) -> Any:
    """``strategy_config: ~`` in ROLL examples means "no settings"."""
    return {} if value is None else value


#: wraps an optional type so the strings ``None``/``null`` also mean null
NoneStr = BeforeValidator(_none_string)
#: a mapping where YAML null means empty
FreeDict = Annotated[dict[str, Any], BeforeValidator(_empty_dict)]
