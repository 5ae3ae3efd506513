"""Errors of MPS sharing, and the reference's texts for them.

Three kinds, because callers react differently: a configuration the MPS
daemon cannot serve (`MpsConfigError`) is permanent until the config or the
hardware changes; a control daemon that did not start (`MpsStartError`) or a
daemon the plugin cannot reach yet (`MpsNotReady`) is retried with backoff.
Every message is one line, because it ends up on ``/state`` and in a single
log record.
"""

from __future__ import annotations

from enum import StrEnum

from foundation.errors import PermanentError, TransientError

__all__ = [
    "MIG_NOT_SUPPORTED",
    "REPLICAS_EXCEEDED",
    "CommandFailure",
    "MpsCommandError",
    "MpsConfigError",
    "MpsNotReady",
    "MpsStartError",
    "one_line",
]

# The plugin's refusal to share MIG devices through MPS (start-up is fatal).
MIG_NOT_SUPPORTED = "sharing using MPS is not supported for MIG devices"
# The control daemon's refusal of more replicas than MPS accepts clients.
REPLICAS_EXCEEDED = (
    "invalid MPS configuration: invalid device maximum allowed replicas exceeded: "
    "{replicas} > {cap}"
)


def one_line(text: str) -> str:
    """Collapse whitespace, line breaks included, so the text prints as one line."""
    return " ".join(text.split())


class MpsConfigError(PermanentError):
    """The devices and the sharing config do not make a valid MPS setup."""


class MpsStartError(TransientError):
    """A control daemon could not be started (compute mode, directories, control program)."""


class CommandFailure(StrEnum):
    """Why running an external program (the control program, nvidia-smi) failed."""

    MISSING = "missing"  # not found on PATH
    DENIED = "denied"  # permission denied, running it or reaching the daemon
    TIMEOUT = "timeout"  # did not finish in time and was killed
    FAILED = "failed"  # ran and exited non-zero


class MpsCommandError(TransientError):
    """An external program failed; ``failure`` says how, the message says what it printed."""

    def __init__(self, message: str, *, failure: CommandFailure) -> None:
        super().__init__(message)
        self.failure = failure


class MpsNotReady(TransientError):
    """The plugin cannot use a resource's control daemon yet; the message says why."""


class OtherLimits(MpsNotReady):
    """The daemon runs and answers, with the limits of another config.

    A node label change it has not followed yet, or one the plugin has not:
    what the plugin already serves stays served if it was admitted for those
    limits; the new config waits.
    """
