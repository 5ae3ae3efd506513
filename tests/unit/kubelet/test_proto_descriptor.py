"""The generated descriptor matches the v1beta1 contract the kubelet speaks.

The expectations are the contract itself (package, services, method paths,
streaming, every message field with its number, type and label); they are written
out here rather than derived from the stubs, so a drift in api.proto fails a test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor
from grpc import aio

from kubelet.api import api_pb2, api_pb2_grpc

FILE = api_pb2.DESCRIPTOR
STR, BOOL, I64, I32, MSG = (
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_MESSAGE,
)
ONE, MANY = False, True

# message -> [(number, name, type, repeated, message type or None)]
MESSAGES: dict[str, list[tuple[int, str, int, bool, str | None]]] = {
    "DevicePluginOptions": [
        (1, "pre_start_required", BOOL, ONE, None),
        (2, "get_preferred_allocation_available", BOOL, ONE, None),
    ],
    "RegisterRequest": [
        (1, "version", STR, ONE, None),
        (2, "endpoint", STR, ONE, None),
        (3, "resource_name", STR, ONE, None),
        (4, "options", MSG, ONE, "v1beta1.DevicePluginOptions"),
    ],
    "Empty": [],
    "ListAndWatchResponse": [(1, "devices", MSG, MANY, "v1beta1.Device")],
    "TopologyInfo": [(1, "nodes", MSG, MANY, "v1beta1.NUMANode")],
    "NUMANode": [(1, "ID", I64, ONE, None)],
    "Device": [
        (1, "ID", STR, ONE, None),
        (2, "health", STR, ONE, None),
        (3, "topology", MSG, ONE, "v1beta1.TopologyInfo"),
    ],
    "PreStartContainerRequest": [(1, "devices_ids", STR, MANY, None)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [
        (1, "container_requests", MSG, MANY, "v1beta1.ContainerPreferredAllocationRequest")
    ],
    "ContainerPreferredAllocationRequest": [
        (1, "available_deviceIDs", STR, MANY, None),
        (2, "must_include_deviceIDs", STR, MANY, None),
        (3, "allocation_size", I32, ONE, None),
    ],
    "PreferredAllocationResponse": [
        (1, "container_responses", MSG, MANY, "v1beta1.ContainerPreferredAllocationResponse")
    ],
    "ContainerPreferredAllocationResponse": [(1, "deviceIDs", STR, MANY, None)],
    "AllocateRequest": [(1, "container_requests", MSG, MANY, "v1beta1.ContainerAllocateRequest")],
    "ContainerAllocateRequest": [(1, "devices_ids", STR, MANY, None)],
    "CDIDevice": [(1, "name", STR, ONE, None)],
    "AllocateResponse": [
        (1, "container_responses", MSG, MANY, "v1beta1.ContainerAllocateResponse")
    ],
    "ContainerAllocateResponse": [
        (1, "envs", MSG, MANY, "v1beta1.ContainerAllocateResponse.EnvsEntry"),
        (2, "mounts", MSG, MANY, "v1beta1.Mount"),
        (3, "devices", MSG, MANY, "v1beta1.DeviceSpec"),
        (4, "annotations", MSG, MANY, "v1beta1.ContainerAllocateResponse.AnnotationsEntry"),
        (5, "cdi_devices", MSG, MANY, "v1beta1.CDIDevice"),
    ],
    "Mount": [
        (1, "container_path", STR, ONE, None),
        (2, "host_path", STR, ONE, None),
        (3, "read_only", BOOL, ONE, None),
    ],
    "DeviceSpec": [
        (1, "container_path", STR, ONE, None),
        (2, "host_path", STR, ONE, None),
        (3, "permissions", STR, ONE, None),
    ],
}

METHODS = [
    # (service, method, request, response, server streaming)
    ("Registration", "Register", "RegisterRequest", "Empty", False),
    ("DevicePlugin", "GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
    ("DevicePlugin", "ListAndWatch", "Empty", "ListAndWatchResponse", True),
    (
        "DevicePlugin",
        "GetPreferredAllocation",
        "PreferredAllocationRequest",
        "PreferredAllocationResponse",
        False,
    ),
    ("DevicePlugin", "Allocate", "AllocateRequest", "AllocateResponse", False),
    (
        "DevicePlugin",
        "PreStartContainer",
        "PreStartContainerRequest",
        "PreStartContainerResponse",
        False,
    ),
]


def test_file_level_facts() -> None:
    assert FILE.package == "v1beta1"
    assert FILE.GetOptions().go_package == "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
    assert list(FILE.services_by_name) == ["Registration", "DevicePlugin"]
    assert not FILE.enum_types_by_name


def test_messages_are_declared_in_contract_order() -> None:
    assert list(FILE.message_types_by_name) == list(MESSAGES)


@pytest.mark.parametrize(
    ("message", "fields"), [pytest.param(m, f, id=m) for m, f in MESSAGES.items()]
)
def test_message_fields(message: str, fields: list[tuple[int, str, int, bool, str | None]]) -> None:
    descriptor = FILE.message_types_by_name[message]
    actual = [
        (
            f.number,
            f.name,
            f.type,
            f.is_repeated,
            f.message_type.full_name if f.message_type is not None else None,
        )
        for f in descriptor.fields
    ]
    assert actual == fields


@pytest.mark.parametrize("entry", ["EnvsEntry", "AnnotationsEntry"])
def test_maps_are_string_to_string_entries(entry: str) -> None:
    nested = api_pb2.ContainerAllocateResponse.DESCRIPTOR.nested_types_by_name[entry]
    assert nested.GetOptions().map_entry
    assert [(f.number, f.name, f.type) for f in nested.fields] == [
        (1, "key", STR),
        (2, "value", STR),
    ]


@pytest.mark.parametrize(
    ("message", "field", "json_name"),
    [
        pytest.param("Device", "ID", "ID", id="device-id"),
        pytest.param("NUMANode", "ID", "ID", id="numa-id"),
        pytest.param(
            "ContainerPreferredAllocationRequest",
            "available_deviceIDs",
            "availableDeviceIDs",
            id="available",
        ),
        pytest.param(
            "ContainerPreferredAllocationRequest",
            "must_include_deviceIDs",
            "mustIncludeDeviceIDs",
            id="must-include",
        ),
        pytest.param("ContainerPreferredAllocationResponse", "deviceIDs", "deviceIDs", id="ids"),
        pytest.param("ContainerAllocateRequest", "devices_ids", "devicesIds", id="devices-ids"),
        pytest.param(
            "DevicePluginOptions",
            "get_preferred_allocation_available",
            "getPreferredAllocationAvailable",
            id="options",
        ),
    ],
)
def test_json_names(message: str, field: str, json_name: str) -> None:
    descriptor = FILE.message_types_by_name[message].fields_by_name[field]
    assert descriptor.json_name == json_name


@pytest.mark.parametrize(
    ("service", "method", "request_type", "response_type", "streaming"),
    [pytest.param(*m, id=f"{m[0]}.{m[1]}") for m in METHODS],
)
def test_methods(
    service: str, method: str, request_type: str, response_type: str, streaming: bool
) -> None:
    descriptor = FILE.services_by_name[service].methods_by_name[method]
    assert descriptor.input_type.full_name == f"v1beta1.{request_type}"
    assert descriptor.output_type.full_name == f"v1beta1.{response_type}"
    assert descriptor.server_streaming is streaming
    assert descriptor.client_streaming is False


def test_device_plugin_methods_in_contract_order() -> None:
    names = [m.name for m in FILE.services_by_name["DevicePlugin"].methods]
    assert names == [m[1] for m in METHODS if m[0] == "DevicePlugin"]


async def test_allocate_and_list_and_watch_answer_on_the_kubelet_method_paths(
    make_plugin, short_dir: Path
) -> None:
    """A client addressing raw paths, as the kubelet's Go client does, reaches the servicer."""
    plugin = await make_plugin()
    async with aio.insecure_channel(f"unix://{plugin.socket_path}") as channel:
        allocate = channel.unary_unary(
            "/v1beta1.DevicePlugin/Allocate",
            request_serializer=api_pb2.AllocateRequest.SerializeToString,
            response_deserializer=api_pb2.AllocateResponse.FromString,
        )
        request = api_pb2.AllocateRequest()
        request.container_requests.add(devices_ids=["dev-1"])
        response = await allocate(request, timeout=5)
        assert response.container_responses[0].envs["FAKE_VISIBLE_DEVICES"] == "dev-1"

        watch = channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=api_pb2.Empty.SerializeToString,
            response_deserializer=api_pb2.ListAndWatchResponse.FromString,
        )
        call = watch(api_pb2.Empty())
        first = await call.read()
        call.cancel()
        assert [d.ID for d in first.devices] == ["dev-0", "dev-1"]


def test_async_stub_is_typed_for_grpc_aio() -> None:
    stub_types = (Path(api_pb2_grpc.__file__).with_suffix(".pyi")).read_text()
    assert "class DevicePluginAsyncStub(DevicePluginStub):" in stub_types
    assert "ListAndWatch: _aio.UnaryStreamMultiCallable" in stub_types
