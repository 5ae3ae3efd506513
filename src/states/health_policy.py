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

The config file's `health:` section sets every row (`settings.HealthSection`
checks it, with the flag and the variables that override three of its keys):

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
defaults (settings refuses one given in two lists). The policy is built from
that checked section as it is: nothing here judges it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devices.xids import XidPolicy, xid_policy
from settings import ErrorClass, HealthSection

__all__ = ["ErrorClass", "HealthPolicy"]

# The section's defaults, so that `HealthPolicy()` is the policy of a file without one.
DEFAULT_QUIET_PERIOD: float = HealthSection.model_fields["quiet_period"].default
DEFAULT_PROBE_INTERVAL: float = HealthSection.model_fields["probe_interval"].default
DEFAULT_TRANSIENT_XIDS: frozenset[int] = frozenset({94})
DEFAULT_STICKY_XIDS: frozenset[int] = frozenset({48, 64, 74, 79, 95, 119, 120})


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
    def of(cls, section: HealthSection) -> HealthPolicy:
        """The policy a config's (checked) `health` section describes."""
        lists = [section.ignored_xids, section.transient_xids, section.sticky_xids]
        explicit = frozenset(xid for given in lists if given is not None for xid in given)

        def chosen(given: tuple[int, ...] | None, default: frozenset[int]) -> frozenset[int]:
            return default - explicit if given is None else frozenset(given)

        return cls(
            quiet_period=section.quiet_period,
            probe_interval=section.probe_interval,
            ignored_xids=chosen(section.ignored_xids, frozenset()),
            transient_xids=chosen(section.transient_xids, DEFAULT_TRANSIENT_XIDS),
            sticky_xids=chosen(section.sticky_xids, DEFAULT_STICKY_XIDS),
            other_xids=section.other_xids,
            double_bit_ecc=section.double_bit_ecc,
            xids=xid_policy(
                disable=section.disable_healthchecks, enable=section.enable_healthchecks
            ),
        )
