"""Numbers that refuse booleans, for every settings model (docs/configuration.md "Types").

pydantic's lax mode takes `true` for an integer (1) and for a float (1.0): a config line such as
`session_store_max_age_days = true` would quietly mean 1 day. Strict mode cannot be used instead:
environment variables arrive as text (`"60"`) and must still parse. `NoBoolNumbers` is a base
model whose validators refuse a boolean for any field typed `int` or `float` (alone, in a
union with other non-boolean types, or optional), and `inf` / `nan` for a `float` one (`inf`
passes `gt=0`, and an endless interval or timeout only failed later, far from its key); each
error is one pydantic error with the usual location, so the config loader names the key and
where the value came from.
"""

from __future__ import annotations

import math
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


def _number_kind(annotation: Any) -> str | None:
    """`"integer"` / `"number"` when `annotation` takes ints / floats but not booleans, else None."""
    if annotation is int:
        return "integer"
    if annotation is float:
        return "number"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        if bool in members:
            return None
        kinds = [kind for kind in map(_number_kind, members) if kind]
        return kinds[0] if kinds else None
    return None


class NoBoolNumbers(BaseModel):
    """Base model: `int` and `float` fields refuse `true` / `false` (module docstring)."""

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name:
            field = cls.model_fields.get(info.field_name)
            kind = _number_kind(field.annotation) if field is not None else None
            if kind is not None:
                raise PydanticCustomError("bool_not_number", f"Input should be a valid {kind}, not a boolean")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _refuse_non_finite_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, float) and not math.isfinite(value) and info.field_name:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _number_kind(field.annotation) is not None:
                raise PydanticCustomError("finite_number", "Input should be a finite number")
        return value
