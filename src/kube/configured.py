"""Whether this process has Kubernetes API access configured at all, without loading the client.

The official client takes a second or more to import; a node with no access
(no KUBECONFIG, not in a cluster) should learn that from two environment
variables and never pay for it. `kube.client.api_access` looks at the same two
first, so the answer here and there cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping

KUBECONFIG_ENV = "KUBECONFIG"
HOST_ENV = "KUBERNETES_SERVICE_HOST"


def api_configured(env: Mapping[str, str]) -> bool:
    """A kubeconfig is named, or the pod runs in a cluster."""
    return bool(env.get(KUBECONFIG_ENV) or env.get(HOST_ENV))
