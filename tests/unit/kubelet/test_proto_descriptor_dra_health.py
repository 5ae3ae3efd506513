"""The DRA device-health descriptors (KEP-4680) match the kubelet's contract.

The expectations are the contract written out (package, service, the streaming
method and its path, every field with its number, type and label, the enum's
values), not derived from the stubs, so a drift in our .proto fails here. The
servicer and the simulator's client speak both versions with the v1beta1 classes;
that is sound only because the two are identical on the wire, checked here too.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kubelet.api.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from kubelet.api.dra_health.v1beta1 import api_pb2 as health_v1beta1
from kubelet.dra.types import HEALTH_SERVICES

STR, INT64 = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_INT64
MSG, ENUM = FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_ENUM
ONE, MANY = False, True
Field = tuple[int, str, int, bool, str | None]

# message -> [(number, name, type, repeated, message or enum type relative to the package)]
MESSAGES: dict[str, list[Field]] = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": [
        (1, "pool_name", STR, ONE, None),
        (2, "device_name", STR, ONE, None),
    ],
    "DeviceHealth": [
        (1, "device", MSG, ONE, "DeviceIdentifier"),
        (2, "health", ENUM, ONE, "HealthStatus"),
        (3, "last_updated_time", INT64, ONE, None),
        (4, "health_check_timeout_seconds", INT64, ONE, None),
        (5, "message", STR, ONE, None),
    ],
    "NodeWatchResourcesResponse": [(1, "devices", MSG, MANY, "DeviceHealth")],
}
STATUSES = {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
VERSIONS = [
    pytest.param(health_v1alpha1, "v1alpha1", id="v1alpha1"),
    pytest.param(health_v1beta1, "v1beta1", id="v1beta1"),
]


def _fields(descriptor: Descriptor, package: str) -> list[Field]:
    def relative(field: FieldDescriptor) -> str | None:
        kind = field.message_type or field.enum_type
        if kind is None:
            return None
        name: str = kind.full_name
        assert name.startswith(f"{package}.")
        return name.removeprefix(f"{package}.")

    return [(f.number, f.name, f.type, f.is_repeated, relative(f)) for f in descriptor.fields]


@pytest.mark.parametrize(("module", "package"), VERSIONS)
def test_file_facts(module: ModuleType, package: str) -> None:
    descriptor = module.DESCRIPTOR
    assert descriptor.package == package
    assert descriptor.GetOptions().go_package == f"k8s.io/kubelet/pkg/apis/dra-health/{package}"
    assert list(descriptor.services_by_name) == ["DRAResourceHealth"]
    assert sorted(descriptor.message_types_by_name) == sorted(MESSAGES)
    assert not descriptor.dependencies


@pytest.mark.parametrize(("module", "package"), VERSIONS)
@pytest.mark.parametrize("message", list(MESSAGES))
def test_message_fields(module: ModuleType, package: str, message: str) -> None:
    descriptor = module.DESCRIPTOR.message_types_by_name[message]
    assert _fields(descriptor, package) == MESSAGES[message]


@pytest.mark.parametrize(("module", "package"), VERSIONS)
def test_health_status_values(module: ModuleType, package: str) -> None:
    enum = module.DESCRIPTOR.enum_types_by_name["HealthStatus"]
    assert enum.full_name == f"{package}.HealthStatus"
    assert {value.name: value.number for value in enum.values} == STATUSES


@pytest.mark.parametrize(("module", "package"), VERSIONS)
def test_the_stream_method_and_the_name_a_plugin_registers(
    module: ModuleType, package: str
) -> None:
    service = module.DESCRIPTOR.services_by_name["DRAResourceHealth"]
    assert service.full_name == f"{package}.DRAResourceHealth"
    assert service.full_name in HEALTH_SERVICES  # what supported_versions lists
    assert [m.name for m in service.methods] == ["NodeWatchResources"]
    method = service.methods_by_name["NodeWatchResources"]
    assert method.input_type.full_name == f"{package}.NodeWatchResourcesRequest"
    assert method.output_type.full_name == f"{package}.NodeWatchResourcesResponse"
    assert (method.client_streaming, method.server_streaming) == (False, True)


def test_v1beta1_messages_read_back_as_v1alpha1_byte_for_byte() -> None:
    """What one version writes, the other reads unchanged: one message set serves both."""
    response = health_v1beta1.NodeWatchResourcesResponse()
    response.devices.add(
        device=health_v1beta1.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
        health=health_v1beta1.UNHEALTHY,
        last_updated_time=1_700_000_000,
        health_check_timeout_seconds=60,
        message="xid 79",
    )
    wire = response.SerializeToString(deterministic=True)
    as_v1alpha1 = health_v1alpha1.NodeWatchResourcesResponse.FromString(wire)
    assert as_v1alpha1.SerializeToString(deterministic=True) == wire
    (device,) = as_v1alpha1.devices
    assert (device.health, device.message) == (health_v1alpha1.UNHEALTHY, "xid 79")
