"""The two kinds of failure the reconcile loop distinguishes.

A *transient* error (NVML not loaded yet, kubelet socket missing, a bind that
failed) is retried with capped backoff. A *permanent* error (a bad config file)
is not retried on a timer: it waits until one of the inputs changes. Every
package derives its own errors from these two, so the loop can decide what to
do without knowing where an error came from.
"""

from __future__ import annotations


class PluginError(Exception):
    """Base class of every error the plugin raises on purpose."""

    permanent: bool = False


class TransientError(PluginError):
    """Retried with backoff: the same inputs may succeed later."""

    permanent = False


class PermanentError(PluginError):
    """Not retried on a timer: only a change of inputs can fix it."""

    permanent = True
