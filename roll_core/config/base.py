"""The base every config section derives from, and small field helpers shared by all sections.

Every section forbids unknown keys (ROLL silently drops them, which hides typos) and is frozen once
validated, so a config object can be handed to any worker without fear of it changing underneath.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

#: prefix of the description of fields roll accepts only so that ROLL configs load unchanged
COMPAT = "Accepted for ROLL compatibility; roll does not use it."


class RollModel(BaseModel):
    """A config section: unknown keys are errors, values are immutable after validation."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,  # `exp_name: 2024` or `system_envs: {X: 1}` are fine in YAML
    )


def compat(default: Any = None, note: str = "", **kwargs: Any) -> Any:
    """A field kept only so ROLL configs validate; its description and JSON schema say so."""
    return Field(default, description=f"{COMPAT} {note}".strip(), json_schema_extra={"roll_compat": True},
                 **kwargs)


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
