"""Errors raised while building resources or answering allocation requests.

All of them are permanent: the same inventory and options, or the same
request, fail the same way until one of them changes.
"""

from __future__ import annotations

from foundation.errors import PermanentError


class ResourceError(PermanentError):
    """The devices and the config do not make a valid set of resources."""


class InvalidRequest(PermanentError):
    """An Allocate or GetPreferredAllocation request the plugin must refuse.

    The kubelet package maps it to gRPC INVALID_ARGUMENT with the message as is.
    """


class AllocationError(PermanentError):
    """A valid request whose container edits could not be produced.

    Raised only when a CDI device name fails the CDI naming rules (for example
    a legacy `MIG-GPU-<uuid>/<gi>/<ci>` UUID under the uuid strategy). The
    message is the reference's `failed to get allocate response: ...` text.
    """
