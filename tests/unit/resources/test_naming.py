"""Resource names: MIG profiles under the mixed strategy, validation, socket names, IDs."""

from __future__ import annotations

import pytest

from resources.errors import ResourceError
from resources.ids import has_annotation, replica_id, replica_number, strip_replica
from resources.model import socket_name
from resources.naming import mig_resource_name, shared_name, validate_resource_name


@pytest.mark.parametrize(
    ("profile", "expected"),
    [
        pytest.param("1g.5gb", "nvidia.com/mig-1g.5gb", id="plain"),
        pytest.param("7g.80gb", "nvidia.com/mig-7g.80gb", id="whole"),
        pytest.param("1g.10gb+me", "nvidia.com/mig-1g.10gb.me", id="plus-becomes-dot"),
        pytest.param("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all", id="plus-me-all"),
        pytest.param("1g.24gb-me", "nvidia.com/mig-1g.24gb-me", id="minus-kept"),
        pytest.param("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx", id="gfx"),
        pytest.param("3g.71gb", "nvidia.com/mig-3g.71gb", id="h200"),
    ],
)
def test_mixed_strategy_resource_names(profile: str, expected: str) -> None:
    assert mig_resource_name(profile) == expected


@pytest.mark.parametrize(
    "profile",
    [
        pytest.param("1c.2g.10gb", id="compute-slices-below-gpu-slices"),
        pytest.param("1c.7g.40gb+me", id="compute-profile-with-attribute"),
        pytest.param("garbage", id="unparsable"),
    ],
)
def test_profiles_without_a_resource_are_refused(profile: str) -> None:
    with pytest.raises(ResourceError) as error:
        mig_resource_name(profile)
    assert str(error.value) == f"MIG profile '{profile}' does not match any resource patterns"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(
            "nvidia.com/" + "a" * 53,
            "fully-qualified resource name must be 63 characters or less: nvidia.com/" + "a" * 53,
            id="too-long",
        ),
        pytest.param("nvidia.com/GPU", "incorrect format for resource name", id="upper-case"),
        pytest.param("nvidia.com/-gpu", "incorrect format for resource name", id="leading-dash"),
    ],
)
def test_resource_name_validation(name: str, message: str) -> None:
    with pytest.raises(ResourceError, match=message.replace(".", r"\.")):
        validate_resource_name(name)


def test_valid_names_pass_and_shared_names_append_the_suffix() -> None:
    assert validate_resource_name("nvidia.com/" + "a" * 52) == "nvidia.com/" + "a" * 52
    assert shared_name("nvidia.com/gpu") == "nvidia.com/gpu.shared"
    assert shared_name("nvidia.com/mig-1g.5gb") == "nvidia.com/mig-1g.5gb.shared"


@pytest.mark.parametrize(
    ("resource", "socket"),
    [
        ("nvidia.com/gpu", "nvidia-gpu.sock"),
        ("nvidia.com/gpu.shared", "nvidia-gpu.shared.sock"),
        ("nvidia.com/mig-1g.5gb", "nvidia-mig-1g.5gb.sock"),
    ],
)
def test_socket_names(resource: str, socket: str) -> None:
    assert socket_name(resource) == socket


@pytest.mark.parametrize(
    ("device_id", "base", "number", "annotated"),
    [
        pytest.param("GPU-a::3", "GPU-a", 3, True, id="replica"),
        pytest.param("GPU-a", "GPU-a", 0, False, id="plain"),
        pytest.param("a::b::c", "a", 0, True, id="first-separator-wins"),
        pytest.param("a::", "a", 0, True, id="empty-number"),
        pytest.param("MIG-x::12", "MIG-x", 12, True, id="mig-replica"),
    ],
)
def test_annotated_ids(device_id: str, base: str, number: int, annotated: bool) -> None:
    assert strip_replica(device_id) == base
    assert replica_number(device_id) == number
    assert has_annotation(device_id) is annotated


def test_replica_id_round_trips() -> None:
    assert replica_id("GPU-a", 7) == "GPU-a::7"
    assert strip_replica(replica_id("GPU-a", 7)) == "GPU-a"
    assert replica_number(replica_id("GPU-a", 7)) == 7
