"""Failures of serving or registering a resource; both are retried with backoff."""

from __future__ import annotations

from foundation.errors import TransientError


class ServeError(TransientError):
    """A resource's gRPC server could not bind or answer on its socket."""


class RegistrationError(TransientError):
    """The kubelet did not accept (or did not answer) a registration."""
