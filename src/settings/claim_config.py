"""The opaque per-claim GPU config of DRA mode: NVIDIA's `GpuConfig`, validated.

A ResourceClaim may carry, per request, opaque parameters for our driver
(`status.allocation.devices.config[].opaque.parameters`). Users write them as
they do for NVIDIA's DRA driver:

    apiVersion: resource.nvidia.com/v1beta1
    kind: GpuConfig
    sharing:
      strategy: TimeSlicing            # or MPS
      timeSlicingConfig: {interval: Default}
      mpsConfig:
        defaultActiveThreadPercentage: 50
        defaultPinnedDeviceMemoryLimit: 10Gi
        defaultPerDevicePinnedMemoryLimit: {GPU-...: 5Gi}

It is decoded strictly, as NVIDIA's driver decodes user input (an unknown key
is an error, not a typo silently ignored), and every problem is one line
naming where it is (`sharing.strategy: ...`), since the plugin reports it as
the claim's error to the kubelet and on `/state`. Quantities follow the
Kubernetes quantity syntax (`10Gi`, `512Mi`, `1G`, plain bytes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from settings.errors import one_line

__all__ = [
    "API_VERSION",
    "ClaimConfigError",
    "ClaimSharing",
    "SharingMode",
    "TimeSlice",
    "parse_gpu_config",
]

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "GpuConfig"

MAX_BYTES = 2**63 - 1  # 8Ei, a Kubernetes quantity's int64 bound
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTORS = {
    None: 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip


class ClaimConfigError(ValueError):
    """An opaque config that is not a valid `GpuConfig`; the message is one line."""


class SharingMode(StrEnum):
    TIME_SLICING = "TimeSlicing"
    MPS = "MPS"


class TimeSlice(StrEnum):
    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


def quantity_bytes(value: Any) -> int:
    """A Kubernetes quantity (`10Gi`, `512Mi`, `1G`, `1048576`) in bytes."""
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    match = _QUANTITY.match(text) if isinstance(text, str) and len(text) <= 64 else None
    if match is None:
        raise ValueError(f"not a quantity: {_quoted(value)}")
    # Exact, and bounded before it becomes an int: no float overflow, no huge number.
    amount = Decimal(match.group(1)) * _FACTORS[match.group(2)]
    if amount > MAX_BYTES:
        raise ValueError(f"{_quoted(value)} is more than 8Ei")
    return int(amount)


def _quoted(value: Any, limit: int = 40) -> str:
    """A value as an error quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _TimeSlicing(_Strict):
    interval: TimeSlice = TimeSlice.DEFAULT


class _Mps(_Strict):
    thread_percentage: int | None = Field(
        default=None, alias="defaultActiveThreadPercentage", ge=0, le=100, strict=True
    )
    pinned_limit: int | None = Field(default=None, alias="defaultPinnedDeviceMemoryLimit")
    per_device_limits: dict[str, int] = Field(
        default_factory=dict, alias="defaultPerDevicePinnedMemoryLimit"
    )

    @field_validator("pinned_limit", mode="before")
    @classmethod
    def _limit(cls, value: Any) -> int | None:
        return None if value is None else _megabyte_at_least(value)

    @field_validator("per_device_limits", mode="before")
    @classmethod
    def _limits(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {str(key): _megabyte_at_least(limit) for key, limit in value.items()}


class _Sharing(_Strict):
    strategy: SharingMode
    time_slicing: _TimeSlicing | None = Field(default=None, alias="timeSlicingConfig")
    mps: _Mps | None = Field(default=None, alias="mpsConfig")


class _GpuConfig(_Strict):
    api_version: Literal["resource.nvidia.com/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["GpuConfig"]
    sharing: _Sharing | None = None


def _megabyte_at_least(value: Any) -> int:
    limit = quantity_bytes(value)
    if limit < 2**20:
        raise ValueError(f"limit set too low: {str(value)[:40]} (at least 1Mi)")
    return limit


@dataclass(frozen=True)
class ClaimSharing:
    """How the devices of one claim request are shared (None fields: the defaults)."""

    mode: SharingMode | None = None
    interval: TimeSlice = TimeSlice.DEFAULT
    thread_percentage: int | None = None
    pinned_limit: int | None = None  # bytes, every device
    per_device_limits: Mapping[str, int] | None = None  # device UUID or index -> bytes


def parse_gpu_config(parameters: Any) -> ClaimSharing:
    """The sharing a `GpuConfig` asks for.

    Raises:
        ClaimConfigError: not a `GpuConfig`, or one with a bad value; one line.
    """
    if not isinstance(parameters, Mapping):
        raise ClaimConfigError(f"expected a GpuConfig object, found {type(parameters).__name__}")
    try:
        config = _GpuConfig.model_validate(parameters)
    except ValidationError as err:
        raise ClaimConfigError(_first_problem(err)) from None
    sharing = config.sharing
    if sharing is None:
        return ClaimSharing()
    if sharing.strategy is SharingMode.TIME_SLICING and sharing.mps is not None:
        raise ClaimConfigError("sharing.mpsConfig: cannot be used with the TimeSlicing strategy")
    if sharing.strategy is SharingMode.MPS and sharing.time_slicing is not None:
        raise ClaimConfigError("sharing.timeSlicingConfig: cannot be used with the MPS strategy")
    mps = sharing.mps or _Mps()
    return ClaimSharing(
        mode=sharing.strategy,
        interval=(sharing.time_slicing or _TimeSlicing()).interval,
        thread_percentage=mps.thread_percentage,
        pinned_limit=mps.pinned_limit,
        per_device_limits=mps.per_device_limits or None,
    )


_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required",
    "literal_error": "expected {expected}",
    "enum": "expected one of {expected}",
    "less_than_equal": "must not be greater than {le}",
    "greater_than_equal": "must not be less than {ge}",
    "int_type": "expected an integer",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
}


def _first_problem(err: ValidationError) -> str:
    problem = err.errors()[0]
    where = ".".join(str(part) for part in problem["loc"])
    kind = problem["type"]
    template = _MESSAGES.get(kind)
    if template is not None:
        message = template.format(**problem.get("ctx", {}))
    else:
        message = str(problem["msg"]).removeprefix("Value error, ")
    found = problem.get("input")
    quiet = kind in ("missing", "extra_forbidden", "value_error")
    shown = "" if quiet else f" (found {_quoted(found)})"
    if len(where) > 120:
        where = where[:117] + "..."
    return one_line(f"{where}: {message}{shown}")
