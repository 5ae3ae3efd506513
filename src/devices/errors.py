"""Errors of the device layer, sorted by what the reconcile loop should do about them.

A node whose driver is missing or not loaded yet (`NvmlUnavailable`) and a
discovery pass that failed half-way (`DiscoveryError`) can both succeed later
without any change on our side, so they are transient and retried with
backoff. A broken simulated node profile (`ProfileError`) will fail the same
way until someone edits the file, so it is permanent. Every message is one
line that names the device or file at fault, because it ends up verbatim in
logs, `/state` and the exit reason.
"""

from __future__ import annotations

from foundation.errors import PermanentError, TransientError


class NvmlUnavailable(TransientError):
    """NVML cannot start on this node (no driver, driver not loaded, library mismatch)."""


class DiscoveryError(TransientError):
    """NVML started but reading the devices failed; the message names the device and call."""


class ProfileError(PermanentError):
    """A simulated node profile is missing or invalid: `<file>: <key path>: <problem>`."""


class MigError(TransientError):
    """A MIG instance could not be created or destroyed (one line, naming the GPU)."""
