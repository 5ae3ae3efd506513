"""How the health machine treats each kind of error: the policy table, as data.

Every reported error falls in one class, and the class decides how a device
gets back to healthy:

- `ignored`: the error changes nothing (an application's own fault, or one
  the operator chose to ignore);
- `transient`: the device is unhealthy until no error has arrived for the
  quiet period and a fresh probe through NVML succeeds;
- `sticky`: as transient, and in addition a probe must show that the device
  was reset since the error (a fresh handle, nothing pending retirement or
  remapping; the simulated backend counts injected resets).

Defaults, chosen from NVIDIA's XID catalogue ("recommended action: reset the
GPU" makes an XID sticky):

| XIDs | class | meaning |
|---|---|---|
| 13, 31, 43, 45, 68, 109 | ignored | application errors (reference list; `DP_*HEALTHCHECKS`) |
| 94 | transient | contained ECC error: the application was stopped, the GPU is fine |
| 48 | sticky | double-bit ECC error |
| 64 | sticky | page retirement / row remapping failure |
| 74 | sticky | NVLink error |
| 79 | sticky | GPU has fallen off the bus |
| 95 | sticky | uncontained ECC error |
| 119, 120 | sticky | GSP RPC timeout / GSP error |
| any other XID | transient | `otherXids` |
| double-bit ECC event | sticky | `doubleBitEcc` |

A lost device (its NVML calls fail) is unhealthy until a probe succeeds again.

Config file (`health:` in the v1 config; every key optional):

    health:
      quietPeriod: 60             # seconds; --health-quiet-period / HEALTH_QUIET_PERIOD win
      probeInterval: 10           # seconds between re-probes of a device that is not healthy
      disableHealthchecks: "all"  # like DP_DISABLE_HEALTHCHECKS (the variable wins): all, xids,
      enableHealthchecks: [79]    # ... or XIDs as a list or comma string; likewise for ENABLE
      ignoredXids: [92]
      transientXids: [94]
      stickyXids: [48, 79]        # a list replaces the default for its class
      otherXids: transient        # class of XIDs listed nowhere
      doubleBitEcc: sticky

An XID given explicitly in one list is taken out of the other classes'
defaults; giving it in two explicit lists is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from devices.xids import XidPolicy, XidValue, xid_policy
from foundation.errors import PermanentError

DEFAULT_QUIET_PERIOD = 60.0
DEFAULT_PROBE_INTERVAL = 10.0
DEFAULT_TRANSIENT_XIDS: frozenset[int] = frozenset({94})
DEFAULT_STICKY_XIDS: frozenset[int] = frozenset({48, 64, 74, 79, 95, 119, 120})


class ErrorClass(StrEnum):
    IGNORED = "ignored"
    TRANSIENT = "transient"
    STICKY = "sticky"


class HealthPolicyError(PermanentError):
    """The `health` section of the config is invalid; the message is one line."""


@dataclass(frozen=True)
class HealthPolicy:
    """Quiet period, probe pacing and the class of every error."""

    quiet_period: float = DEFAULT_QUIET_PERIOD
    probe_interval: float = DEFAULT_PROBE_INTERVAL
    ignored_xids: frozenset[int] = frozenset()
    transient_xids: frozenset[int] = DEFAULT_TRANSIENT_XIDS
    sticky_xids: frozenset[int] = DEFAULT_STICKY_XIDS
    other_xids: ErrorClass = ErrorClass.TRANSIENT
    double_bit_ecc: ErrorClass = ErrorClass.STICKY
    xids: XidPolicy = field(default_factory=XidPolicy)  # the DP_*HEALTHCHECKS filter
    history_limit: int = 16  # transitions kept per device

    def classify_xid(self, xid: int) -> ErrorClass:
        if self.xids.is_disabled(xid) or xid in self.ignored_xids:
            return ErrorClass.IGNORED
        if xid in self.sticky_xids:
            return ErrorClass.STICKY
        if xid in self.transient_xids:
            return ErrorClass.TRANSIENT
        return self.other_xids

    @classmethod
    def from_mapping(
        cls,
        mapping: Mapping[str, Any] | None,
        *,
        quiet_period: float | None = None,
        disable: XidValue = None,
        enable: XidValue = None,
    ) -> HealthPolicy:
        """The policy of a config file's `health` section, with overrides from flags/env.

        `quiet_period`, `disable` (DP_DISABLE_HEALTHCHECKS) and `enable`
        (DP_ENABLE_HEALTHCHECKS) replace the file's values when not None.

        Raises:
            HealthPolicyError: `health.<key>: <problem>`, one line.
        """
        data = dict(mapping or {})
        unknown = sorted(set(data) - _KEYS)
        if unknown:
            raise HealthPolicyError(
                f"health.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})"
            )
        lists = {key: _xid_set(data, key) for key in _LIST_KEYS if key in data}
        _no_overlap(lists)
        explicit = frozenset().union(*lists.values()) if lists else frozenset()

        def chosen(key: str, default: frozenset[int]) -> frozenset[int]:
            return lists[key] if key in lists else default - explicit

        quiet = _seconds(data, "quietPeriod", DEFAULT_QUIET_PERIOD)
        return cls(
            quiet_period=quiet if quiet_period is None else _checked(quiet_period, "quietPeriod"),
            probe_interval=_seconds(data, "probeInterval", DEFAULT_PROBE_INTERVAL, positive=True),
            ignored_xids=chosen("ignoredXids", frozenset()),
            transient_xids=chosen("transientXids", DEFAULT_TRANSIENT_XIDS),
            sticky_xids=chosen("stickyXids", DEFAULT_STICKY_XIDS),
            other_xids=_error_class(data, "otherXids", ErrorClass.TRANSIENT),
            double_bit_ecc=_error_class(data, "doubleBitEcc", ErrorClass.STICKY),
            xids=xid_policy(
                disable=disable if disable is not None else _xid_value(data, "disableHealthchecks"),
                enable=enable if enable is not None else _xid_value(data, "enableHealthchecks"),
            ),
        )


_LIST_KEYS = ("ignoredXids", "transientXids", "stickyXids")
_KEYS = frozenset(
    {
        "quietPeriod",
        "probeInterval",
        "disableHealthchecks",
        "enableHealthchecks",
        "otherXids",
        "doubleBitEcc",
        *_LIST_KEYS,
    }
)


def _checked(value: Any, key: str, *, positive: bool = False) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise HealthPolicyError(
            f"health.{key}: expected a number of seconds {bound}; found {value!r}"
        )
    return float(value)


def _seconds(data: Mapping[str, Any], key: str, default: float, *, positive: bool = False) -> float:
    return _checked(data[key], key, positive=positive) if key in data else default


def _xid_set(data: Mapping[str, Any], key: str) -> frozenset[int]:
    value = data[key]
    if not isinstance(value, list | tuple):
        raise HealthPolicyError(f"health.{key}: expected a list of XIDs; found {value!r}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or item < 0:
            raise HealthPolicyError(f"health.{key}: XIDs are whole numbers >= 0; found {item!r}")
    return frozenset(value)


def _no_overlap(lists: Mapping[str, frozenset[int]]) -> None:
    keys = list(lists)
    for i, first in enumerate(keys):
        for second in keys[i + 1 :]:
            both = sorted(lists[first] & lists[second])
            if both:
                raise HealthPolicyError(f"health.{second}: XID {both[0]} is also in health.{first}")


def _error_class(data: Mapping[str, Any], key: str, default: ErrorClass) -> ErrorClass:
    if key not in data:
        return default
    try:
        return ErrorClass(data[key])
    except (TypeError, ValueError):
        choices = ", ".join(c.value for c in ErrorClass)
        raise HealthPolicyError(
            f"health.{key}: expected one of {choices}; found {data[key]!r}"
        ) from None


def _xid_value(data: Mapping[str, Any], key: str) -> XidValue:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in value
    ):
        return [str(v) for v in value]
    raise HealthPolicyError(
        f"health.{key}: expected 'all', 'xids', or XIDs (a list or comma string); found {value!r}"
    )
