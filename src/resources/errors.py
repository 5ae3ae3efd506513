"""Errors raised while building resources or answering allocation requests."""

from __future__ import annotations

from foundation.errors import PermanentError


class ResourceError(PermanentError):
    """The devices and the config do not make a valid set of resources."""


class InvalidRequest(PermanentError):
    """An Allocate or GetPreferredAllocation request the plugin must refuse.

    The kubelet package maps it to gRPC INVALID_ARGUMENT with the message as is.
    """
