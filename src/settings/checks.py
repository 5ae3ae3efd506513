"""How a setting refuses a value: one problem line, and of which kind.

Every check of the flags and of the file's sections raises `problem(...)`,
a `PydanticCustomError` whose text is the one line shown to the user, so
validation can only produce messages written for users. A problem is of one
of two kinds, because the reference reports them at two times: a value of
the wrong type (or out of its range) is found while the config file is
parsed, a value the plugin cannot use (an unknown strategy) is found
afterwards, when the flags are validated. The loader lists the first kind
first (`value_problem` marks the second), so the first line is the one the
reference would have printed.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError

from settings.values import show

__all__ = ["VALUE_PROBLEM", "Bool", "Str", "problem", "seconds", "value_problem", "wrong_type"]

VALUE_PROBLEM = "flag_value"


def problem(message: str, kind: str = "file_value") -> PydanticCustomError:
    # The message is pre-formatted; braces in user values must not be read as
    # template fields, so they are passed through the context.
    return PydanticCustomError(kind, "{message}", {"message": message})


def value_problem(message: str) -> PydanticCustomError:
    """A value the plugin cannot use (listed after the wrong types)."""
    return problem(message, VALUE_PROBLEM)


def wrong_type(expected: str, value: Any) -> PydanticCustomError:
    return problem(f"expected {expected}; found {show(value)}")


def _typed(kind: type, label: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if isinstance(value, kind):
            return value
        raise wrong_type(label, value)

    return BeforeValidator(check)


def seconds(value: Any, *, positive: bool = False) -> float:
    """A finite number of seconds, >= 0 (> 0 when ``positive``)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise wrong_type(f"a number of seconds {'> 0' if positive else '>= 0'}", value)
    return float(value)


Str = Annotated[str, _typed(str, "a string")]
Bool = Annotated[bool, _typed(bool, "a boolean (true or false)")]
