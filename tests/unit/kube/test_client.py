"""Finding the API: kubeconfig, in-cluster service account, or none at all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kmock
import pytest

from foundation.errors import TransientError
from kube.client import ApiAccess, api_access
from kube.errors import KubeError
from kube.node_labels import patch_node_labels
from tests.unit.kube.apiserver import ApiServer

NODE = "gpu-node-1"


def _kubeconfig(path: Path, server: str, token: str) -> Path:
    path.write_text(
        f"""
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {server}
users:
- name: plugin
  user:
    token: {token}
contexts:
- name: test
  context:
    cluster: test
    user: plugin
current-context: test
"""
    )
    return path


def _service_account(directory: Path, token: str = "sa-token") -> Path:
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    return directory


def _authorization(apiserver: ApiServer) -> set[str]:
    """The credentials the plugin's requests carried (the test's own setup sends none)."""
    ours = apiserver.handler[kmock.action.FETCH] | apiserver.handler[kmock.action.UPDATE]
    assert ours, "the plugin made no requests"
    return {request.headers.get("Authorization", "") for request in ours}


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="nothing"),
        pytest.param({"KUBERNETES_SERVICE_PORT": "443"}, id="port-only"),
        pytest.param({"KUBECONFIG": "", "KUBERNETES_SERVICE_HOST": ""}, id="empty-values"),
    ],
)
def test_no_api_access_configured(env: dict[str, str], tmp_path: Path) -> None:
    assert api_access(env, service_account_dir=_service_account(tmp_path)) is None


async def test_kubeconfig_from_env_reaches_the_server_with_its_token(
    apiserver: ApiServer, tmp_path: Path
) -> None:
    path = _kubeconfig(tmp_path / "config", apiserver.url, "kc-token")
    access = api_access({"KUBECONFIG": str(path), "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert access is not None
    assert access.source == f"kubeconfig {path} ({apiserver.url})"
    assert access.host == apiserver.url
    assert access.configuration.retries is False

    await apiserver.add_node(NODE, {})
    await asyncio.to_thread(patch_node_labels, access, NODE, {"nvidia.com/x": "1"})
    assert _authorization(apiserver) == {"Bearer kc-token"}


def test_explicit_kubeconfig_wins_over_env(apiserver: ApiServer, tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", apiserver.url, "t")
    access = api_access({"KUBECONFIG": str(tmp_path / "missing")}, kubeconfig=str(path))
    assert access is not None
    assert access.host == apiserver.url


def test_unusable_kubeconfig_is_a_one_line_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(KubeError, match=rf"^cannot load kubeconfig {missing}: ") as caught:
        api_access({"KUBECONFIG": str(missing)})
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, TransientError)


@pytest.mark.parametrize(
    ("host", "url"),
    [
        pytest.param("10.0.0.1", "https://10.0.0.1:443", id="ipv4"),
        pytest.param("fd00::1", "https://[fd00::1]:443", id="ipv6"),
    ],
)
def test_in_cluster_service_account(tmp_path: Path, host: str, url: str) -> None:
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
    access = api_access(env, service_account_dir=_service_account(tmp_path))
    assert access is not None
    assert access.host == url
    assert access.source == f"in-cluster service account ({url})"
    assert access.configuration.api_key["BearerToken"] == "bearer sa-token"
    assert access.configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert access.configuration.retries is False


def test_in_cluster_without_a_token_is_an_error(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeError, match=r"^cannot use the in-cluster service account: .*token"):
        api_access(env, service_account_dir=tmp_path)


async def test_explicit_host_with_token(apiserver: ApiServer) -> None:
    access = ApiAccess.for_host(apiserver.url + "/", token="direct")
    assert access.host == apiserver.url
    await apiserver.add_node(NODE, {})
    await asyncio.to_thread(patch_node_labels, access, NODE, {"nvidia.com/x": "1"})
    assert _authorization(apiserver) == {"Bearer direct"}
