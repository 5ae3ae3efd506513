"""Allocate: what a container gets for every device-list strategy and combination.

Expectations list every field in order (envs as ordered pairs), so a change in
the order of operations shows up here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from devices.model import Inventory
from resources.allocation import Allocator
from resources.builder import plan_resources
from resources.edits import ContainerEdits
from resources.errors import AllocationError, InvalidRequest
from resources.options import (
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharingOptions,
    SharingStrategy,
)

from .nodes import FakeHost, gpu_uuid, inventory, make_gpu, mig_uuid, plain_node

RID = "3b0c4a1e-0000-4000-8000-000000000001"
G0, G1 = gpu_uuid(0), gpu_uuid(1)
ROOT = "/var/run/nvidia-container-devices"
KEY = f"cdi.k8s.io/nvidia-device-plugin_{RID}"
ENVVAR = DeviceListStrategy.ENVVAR
VOLUMES = DeviceListStrategy.VOLUME_MOUNTS
ANNOTATIONS = DeviceListStrategy.CDI_ANNOTATIONS
CRI = DeviceListStrategy.CDI_CRI


def cdi(name: str, cls: str = "gpu") -> str:
    return f"k8s.device-plugin.nvidia.com/{cls}={name}"


def allocator(
    node: Inventory | None = None,
    host: FakeHost | None = None,
    resource: str = "nvidia.com/gpu",
    **options: Any,
) -> Allocator:
    host = host or FakeHost(files={"/dev/nvidiactl", "/dev/nvidia-uvm"})
    opts = host.options(**options)
    plan = plan_resources(node or plain_node(2), opts)
    found = plan.resource(resource)
    assert found is not None, [r.name for r in plan.resources]
    return Allocator(found, opts, new_response_id=lambda: RID)


def summary(edits: ContainerEdits) -> dict[str, list[Any]]:
    """Every field, in order, leaving out the empty ones."""
    fields: dict[str, list[Any]] = {
        "envs": list(edits.envs.items()),
        "mounts": [(m.container_path, m.host_path) for m in edits.mounts],
        "devices": [(d.container_path, d.host_path, d.permissions) for d in edits.devices],
        "annotations": list(edits.annotations.items()),
        "cdi": list(edits.cdi_devices),
    }
    assert all(not m.read_only for m in edits.mounts)
    return {name: value for name, value in fields.items() if value}


GPU_NAMES = f"{cdi(G0)},{cdi(G1)}"
CONTROL_SPECS = [
    ("/dev/nvidiactl", "/dev/nvidiactl", "rw"),
    ("/dev/nvidia-uvm", "/dev/nvidia-uvm", "rw"),
]
GPU_SPECS = [("/dev/nvidia0", "/dev/nvidia0", "rw"), ("/dev/nvidia1", "/dev/nvidia1", "rw")]
MARKERS = [(f"{ROOT}/{G0}", "/dev/null"), (f"{ROOT}/{G1}", "/dev/null")]


@pytest.mark.parametrize(
    ("strategies", "pass_specs", "expected"),
    [
        pytest.param(
            (ENVVAR,), False, {"envs": [("NVIDIA_VISIBLE_DEVICES", f"{G0},{G1}")]}, id="envvar"
        ),
        pytest.param(
            (ENVVAR,),
            True,
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", f"{G0},{G1}")],
                "devices": CONTROL_SPECS + GPU_SPECS,
            },
            id="envvar+specs",
        ),
        pytest.param(
            (VOLUMES,),
            False,
            {"envs": [("NVIDIA_VISIBLE_DEVICES", ROOT)], "mounts": MARKERS},
            id="volume-mounts",
        ),
        pytest.param(
            (ENVVAR, VOLUMES),
            False,
            {"envs": [("NVIDIA_VISIBLE_DEVICES", ROOT)], "mounts": MARKERS},
            id="envvar+volume-mounts-overrides",
        ),
        pytest.param(
            (ANNOTATIONS,), False, {"annotations": [(KEY, GPU_NAMES)]}, id="cdi-annotations"
        ),
        pytest.param((CRI,), False, {"cdi": [cdi(G0), cdi(G1)]}, id="cdi-cri"),
        pytest.param((CRI,), True, {"cdi": [cdi(G0), cdi(G1)]}, id="cdi-only-ignores-specs"),
        pytest.param(
            (ANNOTATIONS, CRI),
            True,
            {"annotations": [(KEY, GPU_NAMES)], "cdi": [cdi(G0), cdi(G1)]},
            id="both-cdi",
        ),
        pytest.param(
            (ENVVAR, ANNOTATIONS),
            True,
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", f"{G0},{G1}")],
                "devices": CONTROL_SPECS + GPU_SPECS,
                "annotations": [(KEY, GPU_NAMES)],
            },
            id="envvar+cdi-annotations",
        ),
        pytest.param(
            (VOLUMES, CRI),
            False,
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", ROOT)],
                "mounts": MARKERS,
                "cdi": [cdi(G0), cdi(G1)],
            },
            id="volume-mounts+cdi-cri",
        ),
        pytest.param((), True, {}, id="no-strategy-adds-nothing"),
    ],
)
def test_strategy_matrix(
    strategies: tuple[DeviceListStrategy, ...], pass_specs: bool, expected: dict[str, Any]
) -> None:
    alloc = allocator(device_list_strategy=strategies, pass_device_specs=pass_specs)
    assert summary(alloc.allocate([G0, G1])) == expected


def test_index_strategy_uses_request_order_and_the_mig_form() -> None:
    node = inventory([make_gpu(0, migs=[(0, "1g.5gb", 4864), (3, "1g.5gb", 4864)])])
    alloc = allocator(
        node,
        resource="nvidia.com/mig-1g.5gb",
        mig_strategy=MigStrategy.MIXED,
        device_id_strategy=DeviceIdStrategy.INDEX,
        device_list_strategy=(ENVVAR, CRI),
    )
    edits = alloc.allocate([mig_uuid(0, 3), mig_uuid(0, 0)])
    assert summary(edits) == {
        "envs": [("NVIDIA_VISIBLE_DEVICES", "0:3,0:0")],
        "cdi": [cdi("0:3"), cdi("0:0")],
    }


REPLICAS = [f"{G1}::2", f"{G0}::0", f"{G1}::0"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param(
            {"device_list_strategy": (ENVVAR,), "pass_device_specs": True},
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", f"{G1},{G0}")],
                # DeviceSpecs follow the raw IDs: one node per replica, as the reference.
                "devices": [
                    *CONTROL_SPECS,
                    ("/dev/nvidia1", "/dev/nvidia1", "rw"),
                    ("/dev/nvidia0", "/dev/nvidia0", "rw"),
                    ("/dev/nvidia1", "/dev/nvidia1", "rw"),
                ],
            },
            id="uuid",
        ),
        pytest.param(
            {"device_list_strategy": (ENVVAR,), "device_id_strategy": DeviceIdStrategy.INDEX},
            {"envs": [("NVIDIA_VISIBLE_DEVICES", "1,0")]},
            id="index",
        ),
        pytest.param(
            {"device_list_strategy": (VOLUMES, ANNOTATIONS)},
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", ROOT)],
                "mounts": [(f"{ROOT}/{G1}", "/dev/null"), (f"{ROOT}/{G0}", "/dev/null")],
                "annotations": [(KEY, f"{cdi(G1)},{cdi(G0)}")],
            },
            id="volume-mounts-and-cdi",
        ),
    ],
)
def test_replica_ids_are_deduplicated_in_what_the_runtime_sees(
    options: dict[str, Any], expected: dict[str, Any]
) -> None:
    sharing = SharingOptions(strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 4})
    alloc = allocator(sharing=sharing, **options)
    assert summary(alloc.allocate(REPLICAS)) == expected


@pytest.mark.parametrize(
    ("roots", "host_prefix"),
    [
        pytest.param({"driver_root": "/run/nvidia/driver"}, "/run/nvidia/driver", id="driver-root"),
        pytest.param(
            {"driver_root": "/run/nvidia/driver", "dev_root": "/host"}, "/host", id="dev-root-wins"
        ),
        pytest.param(
            {"driver_root": "/run/nvidia/driver", "dev_root": ""},
            "/run/nvidia/driver",
            id="empty-dev-root",
        ),
    ],
)
def test_device_specs_honour_the_dev_root(roots: dict[str, Any], host_prefix: str) -> None:
    host = FakeHost(
        files={"/dev/nvidia-modeset"}, char_devices={"/dev/nvidia-caps-imex-channels/channel0"}
    )
    alloc = allocator(host=host, pass_device_specs=True, imex_channel_ids=(0,), **roots)
    assert summary(alloc.allocate([G1]))["devices"] == [
        ("/dev/nvidia-modeset", f"{host_prefix}/dev/nvidia-modeset", "rw"),
        ("/dev/nvidia1", f"{host_prefix}/dev/nvidia1", "rw"),
        (
            "/dev/nvidia-caps-imex-channels/channel0",
            f"{host_prefix}/dev/nvidia-caps-imex-channels/channel0",
            "rw",
        ),
    ]


def test_mig_device_specs_carry_the_capability_nodes() -> None:
    node = inventory([make_gpu(0, minor=6, migs=[(0, "1g.5gb", 4864)])])
    alloc = allocator(
        node, host=FakeHost(), mig_strategy=MigStrategy.SINGLE, pass_device_specs=True
    )
    assert [d[0] for d in summary(alloc.allocate([mig_uuid(0, 0)]))["devices"]] == [
        "/dev/nvidia6",
        "/dev/nvidia-caps/nvidia-cap700",
        "/dev/nvidia-caps/nvidia-cap701",
    ]


IMEX_HOST = FakeHost(
    files={"/dev/nvidiactl"}, char_devices={"/dev/nvidia-caps-imex-channels/channel0"}
)
CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"


@pytest.mark.parametrize(
    ("strategies", "expected"),
    [
        pytest.param(
            (ENVVAR,),
            {"envs": [("NVIDIA_VISIBLE_DEVICES", G0), ("NVIDIA_IMEX_CHANNELS", "0")]},
            id="envvar",
        ),
        pytest.param(
            (VOLUMES,),
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", ROOT)],
                "mounts": [(f"{ROOT}/{G0}", "/dev/null"), (f"{ROOT}/imex/0", "/dev/null")],
            },
            id="volume-mounts-without-env",
        ),
        pytest.param(
            (ENVVAR, VOLUMES),
            {
                "envs": [("NVIDIA_VISIBLE_DEVICES", ROOT), ("NVIDIA_IMEX_CHANNELS", "0")],
                "mounts": [(f"{ROOT}/{G0}", "/dev/null"), (f"{ROOT}/imex/0", "/dev/null")],
            },
            id="envvar+volume-mounts",
        ),
        pytest.param(
            (CRI, ANNOTATIONS),
            {
                "annotations": [(KEY, f"{cdi(G0)},{cdi('0', 'imex-channel')}")],
                "cdi": [cdi(G0), cdi("0", "imex-channel")],
            },
            id="cdi",
        ),
    ],
)
def test_imex_channels_are_injected_per_strategy(
    strategies: tuple[DeviceListStrategy, ...], expected: dict[str, Any]
) -> None:
    alloc = allocator(host=IMEX_HOST, imex_channel_ids=(0,), device_list_strategy=strategies)
    assert summary(alloc.allocate([G0])) == expected


def test_missing_optional_imex_channel_is_not_injected() -> None:
    alloc = allocator(host=FakeHost(), imex_channel_ids=(0,))
    assert summary(alloc.allocate([G0])) == {"envs": [("NVIDIA_VISIBLE_DEVICES", G0)]}


EXTRAS_HOST = FakeHost(
    files={"/dev/gdrdrv", "/dev/nvidia-fs0", "/dev/infiniband/uverbs0"},
    char_devices={"/dev/nvidia-caps-imex-channels/channel0"},
)
EXTRA_ENVS = [("NVIDIA_GDRCOPY", "enabled"), ("NVIDIA_GDS", "enabled"), ("NVIDIA_MOFED", "enabled")]


def test_extras_are_set_for_cdi_only_and_follow_gpus_and_channels() -> None:
    alloc = allocator(
        host=EXTRAS_HOST,
        device_list_strategy=(CRI,),
        gdrcopy_enabled=True,
        gds_enabled=True,
        mofed_enabled=True,
        imex_channel_ids=(0,),
    )
    assert summary(alloc.allocate([G0])) == {
        "envs": EXTRA_ENVS,
        "cdi": [
            cdi(G0),
            cdi("0", "imex-channel"),
            cdi("all", "gdrcopy"),
            cdi("all", "gds"),
            cdi("all", "mofed"),
        ],
    }


def test_extras_without_device_nodes_get_no_cdi_device_but_keep_their_env() -> None:
    alloc = allocator(host=FakeHost(), device_list_strategy=(CRI, ENVVAR), gds_enabled=True)
    assert summary(alloc.allocate([G0])) == {
        "envs": [("NVIDIA_GDS", "enabled"), ("NVIDIA_VISIBLE_DEVICES", G0)],
        "cdi": [cdi(G0)],
    }


MPS = SharingOptions(strategy=SharingStrategy.MPS, replicas={"nvidia.com/gpu": 2})


def test_mps_env_and_mounts_come_first() -> None:
    alloc = allocator(
        sharing=MPS,
        mps_root="/run/nvidia/mps",
        device_list_strategy=(VOLUMES,),
        gds_enabled=True,
        host=FakeHost(),
    )
    assert summary(alloc.allocate([f"{G0}::1"])) == {
        "envs": [
            ("CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe"),
            ("NVIDIA_GDS", "enabled"),
            ("NVIDIA_VISIBLE_DEVICES", ROOT),
        ],
        "mounts": [
            ("/mps/nvidia.com/gpu/pipe", "/run/nvidia/mps/nvidia.com/gpu/pipe"),
            ("/dev/shm", "/run/nvidia/mps/shm"),
            (f"{ROOT}/{G0}", "/dev/null"),
        ],
    }


def test_mps_edits_are_added_under_cdi_only_too() -> None:
    alloc = allocator(sharing=MPS, mps_root="/mps-root", device_list_strategy=(CRI,))
    assert summary(alloc.allocate([f"{G1}::0"])) == {
        "envs": [("CUDA_MPS_PIPE_DIRECTORY", "/mps/nvidia.com/gpu/pipe")],
        "mounts": [
            ("/mps/nvidia.com/gpu/pipe", "/mps-root/nvidia.com/gpu/pipe"),
            ("/dev/shm", "/mps-root/shm"),
        ],
        "cdi": [cdi(G1)],
    }


def test_custom_annotation_prefix_is_concatenated_as_given() -> None:
    alloc = allocator(
        device_list_strategy=(ANNOTATIONS,), cdi_annotation_prefix="custom.cdi.k8s.io/"
    )
    assert summary(alloc.allocate([G0]))["annotations"] == [
        (f"custom.cdi.k8s.io/nvidia-device-plugin_{RID}", cdi(G0))
    ]


def test_each_container_gets_a_fresh_annotation_uuid() -> None:
    plan = plan_resources(plain_node(1), FakeHost().options(device_list_strategy=(ANNOTATIONS,)))
    alloc = Allocator(plan.resources[0])
    keys = [next(iter(alloc.allocate([G0]).annotations)) for _ in range(2)]
    assert keys[0] != keys[1]
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    pattern = r"cdi\.k8s\.io/nvidia-device-plugin_" + uuid4
    assert all(re.fullmatch(pattern, key) for key in keys)


def test_invalid_cdi_names_fail_annotations_but_not_cri() -> None:
    legacy = "MIG-GPU-00000000-0000-0000-0000-000000000000/1/0"
    gpu = make_gpu(0, migs=[(0, "1g.5gb", 4864)])
    gpu = replace(gpu, mig_devices=(replace(gpu.mig_devices[0], uuid=legacy),))
    node = inventory([gpu])
    annotated = allocator(
        node, mig_strategy=MigStrategy.SINGLE, device_list_strategy=(ANNOTATIONS,)
    )
    with pytest.raises(AllocationError) as error:
        annotated.allocate([legacy])
    assert str(error.value).startswith(
        "failed to get allocate response: failed to get allocate response for CDI: "
        "failed to add CDI annotations: CDI annotation failed: invalid device name"
    )
    cri = allocator(node, mig_strategy=MigStrategy.SINGLE, device_list_strategy=(CRI,))
    assert summary(cri.allocate([legacy])) == {"cdi": [cdi(legacy)]}


# ----------------------------------------------------------------------------- validation


def test_unknown_devices_are_refused_with_the_reference_text() -> None:
    with pytest.raises(InvalidRequest) as error:
        allocator().allocate([G0, "GPU-x"])
    assert str(error.value) == (
        'invalid allocation request for "nvidia.com/gpu": invalid request: unknown device: GPU-x'
    )


def test_fail_requests_greater_than_one_rejects_two_replicas() -> None:
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING,
        replicas={"nvidia.com/gpu": 4},
        rename_by_default=True,
        fail_requests_greater_than_one=True,
    )
    alloc = allocator(sharing=sharing, resource="nvidia.com/gpu.shared")
    with pytest.raises(InvalidRequest) as error:
        alloc.allocate([f"{G0}::0", f"{G1}::0"])
    assert str(error.value) == (
        'invalid allocation request for "nvidia.com/gpu.shared": invalid request: '
        "maximum request size for shared resources is 1; found 2"
    )
    assert summary(alloc.allocate([f"{G0}::3"])) == {"envs": [("NVIDIA_VISIBLE_DEVICES", G0)]}


def test_time_slicing_allows_two_replicas_of_one_gpu_by_default() -> None:
    sharing = SharingOptions(strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 4})
    alloc = allocator(sharing=sharing)
    assert summary(alloc.allocate([f"{G0}::0", f"{G0}::1"])) == {
        "envs": [("NVIDIA_VISIBLE_DEVICES", G0)]
    }


def test_unreplicated_resources_accept_several_devices_even_with_the_flag() -> None:
    node = inventory([make_gpu(0, migs=[(0, "1g.5gb", 4864)]), make_gpu(1), make_gpu(2)])
    sharing = SharingOptions(
        strategy=SharingStrategy.TIME_SLICING,
        replicas={"nvidia.com/mig-1g.5gb": 2},
        fail_requests_greater_than_one=True,
    )
    alloc = allocator(node, mig_strategy=MigStrategy.MIXED, sharing=sharing)
    assert summary(alloc.allocate([G1, gpu_uuid(2)])) == {
        "envs": [("NVIDIA_VISIBLE_DEVICES", f"{G1},{gpu_uuid(2)}")]
    }
