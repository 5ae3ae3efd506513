"""The vendored DRA and plugin-registration descriptors match upstream Kubernetes.

The expectations are upstream's contract written out (package, services, method
paths, every field with its number, type and label), not derived from the stubs, so
a drift in a vendored .proto fails here. The DRA servicer and the simulator's client
speak both DRA versions with the v1 message classes; that is sound only because the
two versions' messages are identical on the wire, which is checked here too.
"""

from __future__ import annotations

from types import ModuleType

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.api.dra.v1beta1 import api_pb2 as dra_v1beta1
from kubelet.api.pluginregistration.v1 import api_pb2 as registration

STR, BOOL = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL
MSG = FieldDescriptor.TYPE_MESSAGE
ONE, MANY = False, True
Field = tuple[int, str, int, bool, str | None]

# message -> [(number, name, type, repeated, message type relative to the package)]
DRA_MESSAGES: dict[str, list[Field]] = {
    "NodePrepareResourcesRequest": [(1, "claims", MSG, MANY, "Claim")],
    "NodePrepareResourcesResponse": [
        (1, "claims", MSG, MANY, "NodePrepareResourcesResponse.ClaimsEntry")
    ],
    "NodePrepareResourceResponse": [
        (1, "devices", MSG, MANY, "Device"),
        (2, "error", STR, ONE, None),
    ],
    "Device": [
        (1, "request_names", STR, MANY, None),
        (2, "pool_name", STR, ONE, None),
        (3, "device_name", STR, ONE, None),
        (4, "cdi_device_ids", STR, MANY, None),
    ],
    "NodeUnprepareResourcesRequest": [(1, "claims", MSG, MANY, "Claim")],
    "NodeUnprepareResourcesResponse": [
        (1, "claims", MSG, MANY, "NodeUnprepareResourcesResponse.ClaimsEntry")
    ],
    "NodeUnprepareResourceResponse": [(1, "error", STR, ONE, None)],
    "Claim": [
        (1, "namespace", STR, ONE, None),
        (2, "uid", STR, ONE, None),
        (3, "name", STR, ONE, None),
    ],
}

# map entry -> the value type (keys are the claim UIDs, strings)
DRA_MAPS = {
    "NodePrepareResourcesResponse": "NodePrepareResourceResponse",
    "NodeUnprepareResourcesResponse": "NodeUnprepareResourceResponse",
}

DRA_METHODS = [
    ("NodePrepareResources", "NodePrepareResourcesRequest", "NodePrepareResourcesResponse"),
    ("NodeUnprepareResources", "NodeUnprepareResourcesRequest", "NodeUnprepareResourcesResponse"),
]

REGISTRATION_MESSAGES: dict[str, list[Field]] = {
    "PluginInfo": [
        (1, "type", STR, ONE, None),
        (2, "name", STR, ONE, None),
        (3, "endpoint", STR, ONE, None),
        (4, "supported_versions", STR, MANY, None),
    ],
    "RegistrationStatus": [
        (1, "plugin_registered", BOOL, ONE, None),
        (2, "error", STR, ONE, None),
    ],
    "RegistrationStatusResponse": [],
    "InfoRequest": [],
}

REGISTRATION_METHODS = [
    ("GetInfo", "InfoRequest", "PluginInfo"),
    ("NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse"),
]

DRA_VERSIONS = [
    pytest.param(dra_v1, "k8s.io.kubelet.pkg.apis.dra.v1", "v1", id="v1"),
    pytest.param(dra_v1beta1, "k8s.io.kubelet.pkg.apis.dra.v1beta1", "v1beta1", id="v1beta1"),
]


def _fields(descriptor: Descriptor, package: str) -> list[Field]:
    def relative(field: FieldDescriptor) -> str | None:
        if field.message_type is None:
            return None
        name: str = field.message_type.full_name
        assert name.startswith(f"{package}.")
        return name.removeprefix(f"{package}.")

    return [(f.number, f.name, f.type, f.is_repeated, relative(f)) for f in descriptor.fields]


@pytest.mark.parametrize(("module", "package", "version"), DRA_VERSIONS)
def test_dra_file_facts(module: ModuleType, package: str, version: str) -> None:
    descriptor = module.DESCRIPTOR
    assert descriptor.package == package
    assert descriptor.GetOptions().go_package == f"k8s.io/kubelet/pkg/apis/dra/{version}"
    assert list(descriptor.services_by_name) == ["DRAPlugin"]
    assert list(descriptor.message_types_by_name) == list(DRA_MESSAGES)
    assert not descriptor.enum_types_by_name
    assert not descriptor.dependencies  # no gogoproto import left behind


@pytest.mark.parametrize(("module", "package", "version"), DRA_VERSIONS)
@pytest.mark.parametrize("message", list(DRA_MESSAGES))
def test_dra_message_fields(module: ModuleType, package: str, version: str, message: str) -> None:
    descriptor = module.DESCRIPTOR.message_types_by_name[message]
    assert _fields(descriptor, package) == DRA_MESSAGES[message]


@pytest.mark.parametrize(("module", "package", "version"), DRA_VERSIONS)
@pytest.mark.parametrize(("message", "value"), list(DRA_MAPS.items()))
def test_dra_claim_maps_are_keyed_by_claim_uid_string(
    module: ModuleType, package: str, version: str, message: str, value: str
) -> None:
    entry = module.DESCRIPTOR.message_types_by_name[message].nested_types_by_name["ClaimsEntry"]
    assert entry.GetOptions().map_entry
    assert _fields(entry, package) == [(1, "key", STR, ONE, None), (2, "value", MSG, ONE, value)]


@pytest.mark.parametrize(("module", "package", "version"), DRA_VERSIONS)
@pytest.mark.parametrize(("method", "request_type", "response_type"), DRA_METHODS)
def test_dra_methods(
    module: ModuleType,
    package: str,
    version: str,
    method: str,
    request_type: str,
    response_type: str,
) -> None:
    service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == f"{package}.DRAPlugin"
    descriptor = service.methods_by_name[method]
    assert descriptor.input_type.full_name == f"{package}.{request_type}"
    assert descriptor.output_type.full_name == f"{package}.{response_type}"
    assert (descriptor.client_streaming, descriptor.server_streaming) == (False, False)
    assert [m.name for m in service.methods] == [m[0] for m in DRA_METHODS]


def test_v1beta1_messages_read_back_as_v1_byte_for_byte() -> None:
    """What one version writes, the other reads unchanged: one message set serves both."""
    response = dra_v1beta1.NodePrepareResourcesResponse()
    entry = response.claims["uid-1"]
    entry.devices.add(
        request_names=["gpu"], pool_name="node-a", device_name="gpu-0", cdi_device_ids=["x=y"]
    )
    entry.error = "e"
    wire = response.SerializeToString(deterministic=True)
    as_v1 = dra_v1.NodePrepareResourcesResponse.FromString(wire)
    assert as_v1.SerializeToString(deterministic=True) == wire
    assert as_v1.claims["uid-1"].devices[0].cdi_device_ids == ["x=y"]


def test_registration_file_facts() -> None:
    descriptor = registration.DESCRIPTOR
    assert descriptor.package == "pluginregistration"
    assert descriptor.GetOptions().go_package == "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
    assert list(descriptor.services_by_name) == ["Registration"]
    assert list(descriptor.message_types_by_name) == list(REGISTRATION_MESSAGES)
    assert not descriptor.dependencies


@pytest.mark.parametrize("message", list(REGISTRATION_MESSAGES))
def test_registration_message_fields(message: str) -> None:
    descriptor = registration.DESCRIPTOR.message_types_by_name[message]
    assert _fields(descriptor, "pluginregistration") == REGISTRATION_MESSAGES[message]


@pytest.mark.parametrize(("method", "request_type", "response_type"), REGISTRATION_METHODS)
def test_registration_methods(method: str, request_type: str, response_type: str) -> None:
    service = registration.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    descriptor = service.methods_by_name[method]
    assert descriptor.input_type.full_name == f"pluginregistration.{request_type}"
    assert descriptor.output_type.full_name == f"pluginregistration.{response_type}"
    assert (descriptor.client_streaming, descriptor.server_streaming) == (False, False)
