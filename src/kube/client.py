"""Where the Kubernetes API is and how to authenticate: built once, clients made on demand.

Inside a pod the plugin uses its service account (the API address comes from
`KUBERNETES_SERVICE_HOST`/`_PORT`, the token and CA from the mounted secret);
outside, or when an operator points it elsewhere, `KUBECONFIG` wins, as it
does for the reference's config-manager. With neither, `api_access` answers
`None` and the caller turns node-label selection off (and says so once).

`ApiAccess` keeps one client `Configuration` and hands out a fresh `ApiClient`
per user (each watch thread, each label patch), so connection pools are never
shared between threads. Each client announces which component it serves in
its User-Agent (`nvidia-device-plugin`, `gpu-feature-discovery`), so an API
server's audit log and metrics tell the fleet's two callers apart. The
configuration keeps the loader's token refresh
hook, so rotated service-account tokens are picked up. urllib3's own retries
are switched off: whether and when to try again is each caller's decision
(a backoff of its own, or of whoever calls it), and hidden retries would
multiply the timeouts those callers rely on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kube.configured import HOST_ENV, KUBECONFIG_ENV
from kube.errors import KubeError, describe
from kube.official import ApiClient, Configuration, incluster_config, kube_config

# The config loaders are unannotated in some client releases: reach them through Any.
_incluster: Any = incluster_config
_kubeconfig: Any = kube_config

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
_PORT_ENV = "KUBERNETES_SERVICE_PORT"


@dataclass(frozen=True)
class ApiAccess:
    """A loaded client configuration plus a short description for the log."""

    source: str
    configuration: Configuration = field(repr=False, compare=False)
    user_agent: str = ""

    @property
    def host(self) -> str:
        return str(self.configuration.host)

    def new_client(self) -> ApiClient:
        """A client with its own connection pool; close it with `close_client`."""
        client = ApiClient(configuration=self.configuration)
        if self.user_agent:
            client.user_agent = self.user_agent
        return client

    def named(self, user_agent: str) -> ApiAccess:
        """The same access, announcing itself as `user_agent`."""
        return replace(self, user_agent=user_agent)

    @classmethod
    def for_host(
        cls,
        host: str,
        *,
        token: str | None = None,
        verify_ssl: bool = True,
        user_agent: str = "",
    ) -> ApiAccess:
        """Talk to `host` directly (tests, or a local proxy such as `kubectl proxy`)."""
        configuration = Configuration(host=host.rstrip("/"))
        configuration.verify_ssl = verify_ssl
        if token:
            configuration.api_key["BearerToken"] = f"Bearer {token}"
        return cls._finish(host.rstrip("/"), configuration).named(user_agent)

    @classmethod
    def _finish(cls, source: str, configuration: Configuration) -> ApiAccess:
        configuration.retries = False
        return cls(source=source, configuration=configuration)


def api_access(
    env: Mapping[str, str],
    *,
    kubeconfig: str | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ApiAccess | None:
    """The API access this process has, or None when none is configured.

    Order: an explicit `kubeconfig`, then `KUBECONFIG` from `env`, then the
    in-cluster service account when `KUBERNETES_SERVICE_HOST` is set. A source
    that is configured but unusable (missing token, unreadable kubeconfig)
    raises `KubeError` rather than silently falling back to another one.
    """
    path = kubeconfig or env.get(KUBECONFIG_ENV, "")
    if path:
        return _from_kubeconfig(path)
    if env.get(HOST_ENV):
        return _in_cluster(env, service_account_dir)
    return None


def _from_kubeconfig(path: str) -> ApiAccess:
    configuration = Configuration()
    try:
        # persist_config=False: the kubeconfig is often a read-only mount.
        _kubeconfig.load_kube_config(
            config_file=path, client_configuration=configuration, persist_config=False
        )
    except Exception as exc:
        raise KubeError(f"cannot load kubeconfig {path}: {describe(exc)}") from exc
    return ApiAccess._finish(f"kubeconfig {path} ({configuration.host})", configuration)


def _in_cluster(env: Mapping[str, str], service_account_dir: Path) -> ApiAccess:
    configuration = Configuration()
    loader = _incluster.InClusterConfigLoader(
        token_filename=str(service_account_dir / "token"),
        cert_filename=str(service_account_dir / "ca.crt"),
        environ=env,
    )
    try:
        loader.load_and_set(configuration)
    except Exception as exc:
        raise KubeError(f"cannot use the in-cluster service account: {describe(exc)}") from exc
    return ApiAccess._finish(f"in-cluster service account ({configuration.host})", configuration)


def close_client(client: ApiClient) -> None:
    """Release a client's connections (its `close` is unannotated in some releases)."""
    untyped: Any = client
    untyped.close()
