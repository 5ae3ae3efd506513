"""The kubelet's RegisterRequest checks, as the simulator applies them (pure)."""

from __future__ import annotations

import pytest

from kubelet_sim.validation import (
    endpoint_error,
    is_extended_resource_name,
    registration_error,
    version_error,
)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        pytest.param("nvidia.com/gpu", True, id="gpu"),
        pytest.param("nvidia.com/mig-1g.10gb", True, id="mig"),
        pytest.param("nvidia.com/gpu.shared", True, id="shared"),
        pytest.param("example.com/A_b-1", True, id="mixed-case-name"),
        pytest.param("gpu", False, id="no-slash"),
        pytest.param("", False, id="empty"),
        pytest.param("/gpu", False, id="empty-prefix"),
        pytest.param("nvidia.com/", False, id="empty-name"),
        pytest.param("nvidia.com/a/b", False, id="two-slashes"),
        pytest.param("kubernetes.io/gpu", False, id="native-namespace"),
        pytest.param("foo.kubernetes.io/gpu", False, id="native-subdomain"),
        pytest.param("requests.nvidia.com/gpu", False, id="quota-prefix"),
        pytest.param("Nvidia.com/gpu", False, id="uppercase-prefix"),
        pytest.param("nvidia.com/-gpu", False, id="name-starts-with-dash"),
        pytest.param("nvidia.com/" + "g" * 64, False, id="name-too-long"),
        pytest.param("nvidia.com/" + "g" * 63, True, id="name-max-length"),
    ],
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert is_extended_resource_name(name) is valid


@pytest.mark.parametrize(
    ("endpoint", "valid"),
    [
        pytest.param("nvidia-gpu.sock", True, id="basename"),
        pytest.param("", False, id="empty"),
        pytest.param(".", False, id="dot"),
        pytest.param("..", False, id="dotdot"),
        pytest.param("sub/nvidia-gpu.sock", False, id="relative-path"),
        pytest.param("/var/lib/kubelet/device-plugins/x.sock", False, id="absolute-path"),
    ],
)
def test_endpoint_must_be_a_base_name(endpoint: str, valid: bool) -> None:
    assert (endpoint_error(endpoint) is None) is valid


def test_only_v1beta1_is_supported() -> None:
    assert version_error("v1beta1") is None
    message = version_error("v1alpha1")
    assert message is not None
    assert '"v1alpha1"' in message
    assert '"v1beta1"' in message


@pytest.mark.parametrize(
    ("version", "resource", "endpoint", "expected"),
    [
        pytest.param("v1beta1", "nvidia.com/gpu", "nvidia-gpu.sock", None, id="valid"),
        pytest.param("v1", "nvidia.com/gpu", "x.sock", "API version", id="version-first"),
        pytest.param("v1beta1", "gpu", "a/b", "ResourceName", id="resource-before-endpoint"),
        pytest.param("v1beta1", "nvidia.com/gpu", "a/b", "invalid endpoint", id="endpoint"),
    ],
)
def test_first_failing_rule_is_reported(
    version: str, resource: str, endpoint: str, expected: str | None
) -> None:
    error = registration_error(version=version, resource_name=resource, endpoint=endpoint)
    if expected is None:
        assert error is None
    else:
        assert error is not None
        assert expected in error
