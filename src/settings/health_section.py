"""Checks for the ``health`` section of the v1 config file, run when the file is read.

The section tunes the device health machine (`states.health_policy` explains
each key). The policy is built in a higher layer, inside the reconcile loop;
checking the section here as well means a bad value is found where every
other config problem is found: by ``nvidia-device-plugin check``, at start-up
and on a reload, together with the file's other problems. The checks and
their messages follow the policy's, so both say the same thing about a file.

The values are kept as written (the policy reads the mapping), so these
checks only judge them; the section's model is `settings.file_schema.HealthFile`.
Unlike elsewhere in the file, an unknown key here is an error: a misspelt
``quietPeriod`` would otherwise silently keep the default while the operator
believes it changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticCustomError

from settings.values import show

__all__ = [
    "ERROR_CLASSES",
    "XID_LISTS",
    "check_error_class",
    "check_lists_disjoint",
    "check_positive_seconds",
    "check_seconds",
    "check_xid_filter",
    "check_xid_words",
    "check_xids",
]

ERROR_CLASSES = ("ignored", "transient", "sticky")
_XID_WORDS = frozenset({"all", "xids"})
_UINT64_MAX = (1 << 64) - 1


def _fail(message: str) -> PydanticCustomError:
    return PydanticCustomError("health_value", "{message}", {"message": message})


def _seconds(*, positive: bool) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
            bound = "> 0" if positive else ">= 0"
            raise _fail(f"expected a number of seconds {bound}; found {show(value)}")
        return value

    return check


def _xids(value: Any) -> Any:
    if not isinstance(value, list | tuple):
        raise _fail(f"expected a list of XIDs; found {show(value)}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise _fail(f"XIDs are whole numbers >= 0; found {show(item)}")
    return value


def _error_class(value: Any) -> Any:
    if value not in ERROR_CLASSES:
        raise _fail(f"expected one of {', '.join(ERROR_CLASSES)}; found {show(value)}")
    return value


def check_xid_words(text: str) -> str | None:
    """Why a comma list of XIDs (``all``, ``xids`` or numbers) is invalid, or None."""
    for raw in text.split(","):
        token = raw.strip().lower()
        if not token or token in _XID_WORDS:
            continue
        if not (token.isascii() and token.isdigit() and int(token) <= _UINT64_MAX):
            return (
                f"invalid XID {show(raw.strip())}: expected all, xids or XID numbers "
                "separated by commas"
            )
    return None


def _xid_filter(value: Any) -> Any:
    if value is None:
        return value
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in items
    ):
        raise _fail(
            f"expected 'all', 'xids', or XIDs (a list or comma string); found {show(value)}"
        )
    problem = check_xid_words(",".join(str(item) for item in items))
    if problem is not None:
        raise _fail(problem)
    return value


XID_LISTS = ("ignoredXids", "transientXids", "stickyXids")


def check_seconds(value: Any) -> Any:
    return _seconds(positive=False)(value)


def check_positive_seconds(value: Any) -> Any:
    return _seconds(positive=True)(value)


def check_xids(value: Any) -> Any:
    return _xids(value)


def check_error_class(value: Any) -> Any:
    return _error_class(value)


def check_xid_filter(value: Any) -> Any:
    return _xid_filter(value)


def check_lists_disjoint(given: dict[str, Any]) -> None:
    """Each XID in at most one of the explicit lists (``ignoredXids``, ...)."""
    lists = [(key, set(given[key])) for key in XID_LISTS if given.get(key) is not None]
    for index, (first, first_set) in enumerate(lists):
        for second, second_set in lists[index + 1 :]:
            both = sorted(first_set & second_set)
            if both:
                raise _fail(f"{second}: XID {both[0]} is also in health.{first}")
