"""The one import of the official Kubernetes client: every `kube` module takes its names from here.

The client resolves `kubernetes.client.*` lazily through a module
`__getattr__`, and two threads importing it for the first time at once can
each hold a lock the other needs: Python then raises `_DeadlockError` in one
of them. The plugin loads the client from more than one thread (the node
label watch, the event recorder's thread, the DRA side), so the whole client
is imported here, once, while this module's own import lock is held: a second
thread that wants it waits for the first to finish instead of racing it.
"""

from __future__ import annotations

from kubernetes.client import (
    ApiClient,
    Configuration,
    CoreV1Api,
    CustomObjectsApi,
    EventsV1Api,
    VersionApi,
)
from kubernetes.client.exceptions import ApiException
from kubernetes.config import incluster_config, kube_config

__all__ = [
    "ApiClient",
    "ApiException",
    "Configuration",
    "CoreV1Api",
    "CustomObjectsApi",
    "EventsV1Api",
    "VersionApi",
    "incluster_config",
    "kube_config",
]
