"""The NVML backend's mapping from pynvml answers to the Inventory, against a fake pynvml."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from devices.backends import open_library
from devices.errors import DiscoveryError, NvmlUnavailable
from devices.library import DeviceLibrary
from devices.model import Gpu, Inventory, MigAttributes, MigDevice, MigPlacement, P2PLevel
from devices.nvml import NvmlLibrary
from devices.nvmlload import find_nvml_library, preload_nvml

from .conftest import FakeNode
from .fake_pynvml import FakeLink, FakeMig

GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU2 = "GPU-22222222-0000-4000-8000-000000000000"

# What the fake A100-40GB offers (its `nvidia-smi mig -lgip` and `-lgipp`): profile, id,
# memory slices, starts, MiB, (SMs, GPU slices, copy engines, decoders, encoders, jpegs, ofas).
A100_OFFER = [
    ("7g.40gb", 0, 8, (0,), 40192, (98, 7, 7, 5, 0, 1, 1)),
    ("4g.20gb", 5, 4, (0,), 19968, (56, 4, 4, 2, 0, 0, 0)),
    ("3g.20gb", 9, 4, (0, 4), 19968, (42, 3, 3, 2, 0, 0, 0)),
    ("2g.10gb", 14, 2, (0, 2, 4), 9984, (28, 2, 2, 1, 0, 0, 0)),
    ("1g.10gb", 15, 2, (0, 2, 4, 6), 9984, (14, 1, 1, 1, 0, 0, 0)),
    ("1g.5gb", 19, 1, tuple(range(7)), 4864, (14, 1, 1, 0, 0, 0, 0)),
    ("1g.5gb+me", 20, 1, tuple(range(7)), 4864, (14, 1, 1, 1, 0, 1, 1)),
]


def a100_placements() -> tuple[MigPlacement, ...]:
    return tuple(
        MigPlacement(
            profile=profile,
            profile_id=profile_id,
            start=start,
            size=size,
            memory_mib=memory,
            attributes=MigAttributes(
                multiprocessors=sms,
                gi_slices=slices,
                ci_slices=slices,
                copy_engines=copy_engines,
                decoders=decoders,
                encoders=encoders,
                jpegs=jpegs,
                ofas=ofas,
            ),
        )
        for profile, profile_id, size, starts, memory, numbers in A100_OFFER
        for sms, slices, copy_engines, decoders, encoders, jpegs, ofas in [numbers]
        for start in starts
    )


def test_open_library_without_mock_is_nvml() -> None:
    library = open_library(None)
    assert isinstance(library, NvmlLibrary)
    assert isinstance(library, DeviceLibrary)
    assert library.name == "nvml"


def test_inventory_maps_every_field(fake_node: FakeNode) -> None:
    fake_node.library.init()
    inventory = fake_node.library.inventory()

    expected = Inventory(
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        gpus=(
            Gpu(
                index=0,
                minor=0,
                uuid=GPU0,
                name="NVIDIA A100-SXM4-40GB",
                memory_mib=40960,
                pci_bus_id="00000000:07:00.0",
                numa_node=0,
                compute_capability="8.0",
                mig_capable=True,
                mig_enabled=True,
                mig_devices=(
                    MigDevice(
                        uuid="MIG-11111111-0000-4000-8000-000000000001",
                        parent_index=0,
                        slot=0,
                        gi=1,
                        ci=0,
                        profile="3g.20gb",
                        memory_mib=19968,
                        gi_cap_minor=12,
                        ci_cap_minor=13,
                        attributes=MigAttributes(
                            multiprocessors=42,
                            gi_slices=3,
                            ci_slices=3,
                            copy_engines=3,
                            decoders=2,
                            encoders=0,
                            jpegs=0,
                            ofas=0,
                        ),
                        profile_id=9,
                        placement_start=0,
                    ),
                    MigDevice(
                        uuid="MIG-11111111-0000-4000-8000-000000000002",
                        parent_index=0,
                        slot=2,
                        gi=13,
                        ci=0,
                        profile="1g.5gb+me",
                        memory_mib=4864,
                        gi_cap_minor=120,
                        ci_cap_minor=121,
                        attributes=MigAttributes(
                            multiprocessors=14,
                            gi_slices=1,
                            ci_slices=1,
                            copy_engines=1,
                            decoders=1,
                            encoders=0,
                            jpegs=1,
                            ofas=1,
                        ),
                        profile_id=20,
                        placement_start=6,
                    ),
                ),
                nvlinks={2: 4},
                p2p={2: P2PLevel.NODE},
                brand="Nvidia",
                mig_placements=a100_placements(),
            ),
            Gpu(
                index=2,
                minor=3,
                uuid=GPU2,
                name="NVIDIA A100-SXM4-40GB",
                memory_mib=40960,
                pci_bus_id="00000000:4E:00.0",
                numa_node=None,
                compute_capability="8.0",
                mig_capable=True,
                mig_enabled=False,
                nvlinks={0: 4},
                p2p={0: P2PLevel.NODE},
                brand="Nvidia",
            ),
        ),
    )
    assert inventory == expected


def test_display_device_keeps_its_index_slot(fake_node: FakeNode) -> None:
    fake_node.library.init()
    indices = [gpu.index for gpu in fake_node.library.inventory().gpus]
    assert indices == [0, 2]
    assert "GPU-dddddddd-0000-4000-8000-000000000000" not in fake_node.nvml.calls


def test_init_failure_is_nvml_unavailable_with_cause(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailable, match=r"^NVML could not start: Driver Not Loaded$") as info:
        fake_node.library.init()
    assert isinstance(info.value.__cause__, pynvml.NVMLError)
    with pytest.raises(DiscoveryError, match="before init"):
        fake_node.library.inventory()


def test_init_and_shutdown_are_reference_counted(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    library.init()
    assert nvml.inits == 1
    library.shutdown()
    assert nvml.shutdowns == 0
    assert library.inventory().gpus  # still usable by the remaining holder
    library.shutdown()
    library.shutdown()
    assert nvml.shutdowns == 1
    with pytest.raises(DiscoveryError, match="before init"):
        library.inventory()
    library.init()
    assert nvml.inits == 2


def test_failing_shutdown_is_swallowed(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlShutdown", pynvml.NVML_ERROR_UNKNOWN)
    fake_node.library.init()
    fake_node.library.shutdown()
    assert fake_node.nvml.calls[-1] == "nvmlShutdown"


def _is_gpu(index: int) -> Callable[..., bool]:
    return lambda handle, *rest: bool(handle == ("gpu", index))


@pytest.mark.parametrize(
    ("function", "code", "when", "message"),
    [
        pytest.param(
            "nvmlSystemGetDriverVersion",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda *a: True,
            "node: nvmlSystemGetDriverVersion failed: Unknown Error",
            id="driver-version",
        ),
        pytest.param(
            "nvmlDeviceGetUUID",
            pynvml.NVML_ERROR_IRQ_ISSUE,
            _is_gpu(2),
            "GPU 2 (00000000:4E:00.0): nvmlDeviceGetUUID failed: Interrupt Request Issue",
            id="gpu-uuid",
        ),
        pytest.param(
            "nvmlDeviceGetName",
            pynvml.NVML_ERROR_NO_PERMISSION,
            _is_gpu(0),
            "GPU 0: nvmlDeviceGetName failed: Insufficient Permissions",
            id="gpu-name",
        ),
        pytest.param(
            "nvmlDeviceGetCudaComputeCapability",
            pynvml.NVML_ERROR_UNKNOWN,
            _is_gpu(0),
            "GPU 0 (00000000:07:00.0): nvmlDeviceGetCudaComputeCapability failed: Unknown Error",
            id="compute-capability",
        ),
        pytest.param(
            "nvmlDeviceGetMigMode",
            pynvml.NVML_ERROR_NO_PERMISSION,
            _is_gpu(0),
            "GPU 0 (00000000:07:00.0): nvmlDeviceGetMigMode failed: Insufficient Permissions",
            id="mig-mode-other-error",
        ),
        pytest.param(
            "nvmlDeviceGetUUID",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda handle: handle == ("mig", 0, 2),
            "MIG device (0, 2): nvmlDeviceGetUUID failed: Unknown Error",
            id="mig-uuid",
        ),
        pytest.param(
            "nvmlDeviceGetMigDeviceHandleByIndex",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda handle, slot: slot == 1,
            "MIG device (0, 1): nvmlDeviceGetMigDeviceHandleByIndex failed: Unknown Error",
            id="mig-handle-other-error",
        ),
        pytest.param(
            "nvmlDeviceGetGpuInstanceById",
            pynvml.NVML_ERROR_NO_PERMISSION,
            lambda *a: True,
            "MIG device (0, 0): nvmlDeviceGetGpuInstanceById failed: Insufficient Permissions",
            id="gpu-instance",
        ),
        pytest.param(
            "nvmlDeviceGetAttributes",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda handle: handle == ("mig", 0, 2),
            "MIG device (0, 2): nvmlDeviceGetAttributes failed: Unknown Error",
            id="mig-attributes",
        ),
        pytest.param(
            "nvmlDeviceGetNvLinkState",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda handle, link: link == 2,
            "GPU 0 (00000000:07:00.0): nvmlDeviceGetNvLinkState failed: Unknown Error",
            id="nvlink-state",
        ),
        pytest.param(
            "nvmlDeviceGetTopologyCommonAncestor",
            pynvml.NVML_ERROR_UNKNOWN,
            lambda *a: True,
            "GPU 0 and GPU 2: nvmlDeviceGetTopologyCommonAncestor failed: Unknown Error",
            id="topology",
        ),
    ],
)
def test_failing_call_names_the_device(
    fake_node: FakeNode, function: str, code: int, when: Callable[..., bool], message: str
) -> None:
    fake_node.nvml.fail(function, code, when)
    fake_node.library.init()
    with pytest.raises(DiscoveryError) as info:
        fake_node.library.inventory()
    assert str(info.value) == message
    assert isinstance(info.value.__cause__, pynvml.NVMLError)


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(pynvml.NVML_ERROR_NOT_SUPPORTED, id="not-supported"),
        pytest.param(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, id="symbol-missing"),
    ],
)
def test_mig_mode_unavailable_means_not_mig_capable(fake_node: FakeNode, code: int) -> None:
    fake_node.nvml.fail("nvmlDeviceGetMigMode", code)
    fake_node.library.init()
    gpus = fake_node.library.inventory().gpus
    assert [(g.mig_capable, g.mig_enabled, g.mig_devices) for g in gpus] == [
        (False, False, ()),
        (False, False, ()),
    ]
    assert "nvmlDeviceGetMaxMigDeviceCount" not in fake_node.nvml.calls


def test_pcie_only_gpus_have_no_nvlinks_and_missing_topology_is_omitted(
    fake_node: FakeNode,
) -> None:
    for gpu in fake_node.nvml.gpus:
        gpu.links.clear()
    fake_node.nvml.topology.clear()
    fake_node.library.init()
    gpus = fake_node.library.inventory().gpus
    assert [(dict(g.nvlinks), dict(g.p2p)) for g in gpus] == [({}, {}), ({}, {})]


def test_memory_error_is_ignored_on_a_full_gpu(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, _is_gpu(2))
    fake_node.library.init()
    gpus = fake_node.library.inventory().gpus
    assert [g.memory_mib for g in gpus] == [40960, 0]


def test_memory_error_on_a_mig_parent_fails_profile_naming(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, _is_gpu(0))
    fake_node.library.init()
    with pytest.raises(DiscoveryError, match=r"^MIG device \(0, 0\): .*parent memory unknown"):
        fake_node.library.inventory()


def test_cuda_version_falls_back_when_v2_symbol_is_missing(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlSystemGetCudaDriverVersion_v2", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    fake_node.nvml.cuda = 11080
    fake_node.library.init()
    assert fake_node.library.inventory().cuda_driver_version == "11.8"
    assert "nvmlSystemGetCudaDriverVersion" in fake_node.nvml.calls


def test_compute_instance_smaller_than_its_gpu_instance(fake_node: FakeNode) -> None:
    # A 3-slice GPU instance holding a 1-slice compute instance.
    fake_node.nvml.gpus[0].migs = {0: FakeMig("MIG-aa", 2, 0, 2, 0, 19968)}
    fake_node.library.init()
    migs = fake_node.library.inventory().gpus[0].mig_devices
    assert [m.profile for m in migs] == ["1c.3g.20gb"]


def test_unnamed_gpu_instance_profile_is_an_error(fake_node: FakeNode) -> None:
    fake_node.nvml.gi_profile_ids[17] = 30  # 3_SLICE_GFX: exists in NVML, has no name
    fake_node.nvml.gpus[0].migs = {0: FakeMig("MIG-aa", 2, 0, 17, 2, 19968)}
    fake_node.library.init()
    with pytest.raises(DiscoveryError) as info:
        fake_node.library.inventory()
    assert str(info.value) == (
        "MIG device (0, 0): error getting MIG profile: invalid GPU Instance Profile ID: 17"
    )


def test_unknown_topology_level_is_an_error(fake_node: FakeNode) -> None:
    fake_node.nvml.topology[frozenset({0, 2})] = 60
    fake_node.library.init()
    with pytest.raises(DiscoveryError, match=r"^GPU 0 and GPU 2: unknown topology level: 60$"):
        fake_node.library.inventory()


def test_unparsable_numa_node_names_the_gpu(fake_node: FakeNode) -> None:
    fake_node.set_numa("0000:4e:00.0", "abc\n")
    fake_node.library.init()
    with pytest.raises(DiscoveryError, match=r"^GPU 2 \(00000000:4E:00.0\): cannot parse NUMA"):
        fake_node.library.inventory()


def test_missing_mig_minors_file_leaves_capability_minors_unknown(fake_node: FakeNode) -> None:
    fake_node.mig_minors.unlink()
    fake_node.library.init()
    migs = fake_node.library.inventory().gpus[0].mig_devices
    assert [(m.gi_cap_minor, m.ci_cap_minor) for m in migs] == [(None, None), (None, None)]


def _switched(switches: dict[str, int]) -> dict[int, FakeLink]:
    links: dict[int, FakeLink] = {}
    for switch, lanes in switches.items():
        for _ in range(lanes):
            links[len(links)] = FakeLink(True, switch, pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
    return links


def test_gpus_on_shared_nvswitches_are_linked(fake_node: FakeNode) -> None:
    a, b, c = "00000000:C1:00.0", "00000000:C2:00.0", "00000000:C3:00.0"
    gpus = fake_node.nvml.gpus
    gpus[0].links = _switched({a: 2, b: 2, c: 2})
    gpus[2].links = _switched({a: 2, b: 1})
    # An active lane to something that is neither a GPU nor a switch counts for nothing.
    gpus[2].links[10] = FakeLink(True, "00000000:E0:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU)
    fake_node.library.init()
    inventory = fake_node.library.inventory()
    assert [dict(g.nvlinks) for g in inventory.gpus] == [{2: 3}, {0: 3}]


def test_driver_root_without_library_falls_back_to_the_system_search(
    fake_node: FakeNode, tmp_path: Path
) -> None:
    assert preload_nvml(tmp_path / "driver-root") is None
    library = NvmlLibrary(driver_root=str(tmp_path / "driver-root"))
    library.init()
    assert fake_node.nvml.inits == 1


def test_driver_root_with_unloadable_library_fails_init(tmp_path: Path) -> None:
    lib = tmp_path / "lib64" / "libnvidia-ml.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_text("not an ELF file")
    with pytest.raises(NvmlUnavailable, match=r"^cannot load .*lib64/libnvidia-ml\.so\.1"):
        NvmlLibrary(driver_root=str(tmp_path)).init()


def test_driver_root_with_unloadable_library_is_nvml_unavailable(tmp_path: Path) -> None:
    lib = tmp_path / "usr" / "lib64" / "libnvidia-ml.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_text("not an ELF file")
    with pytest.raises(NvmlUnavailable, match=r"^cannot load .*libnvidia-ml\.so\.1"):
        preload_nvml(tmp_path)


def test_library_symlinks_resolve_inside_the_driver_root(tmp_path: Path) -> None:
    real = tmp_path / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.550.54.15"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"\x7fELF")
    # The host's link is absolute; it must land inside the root, not on our filesystem.
    os.symlink("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", real.parent / "link")
    os.symlink("link", real.parent / "libnvidia-ml.so.1")
    assert find_nvml_library(tmp_path) == real
    assert find_nvml_library(tmp_path / "elsewhere") is None


def test_root_driver_root_preloads_nothing() -> None:
    assert preload_nvml(Path("/")) is None


def test_node_without_gpus_is_an_empty_inventory(fake_node: FakeNode) -> None:
    fake_node.nvml.gpus.clear()
    fake_node.library.init()
    inventory = fake_node.library.inventory()
    assert inventory == Inventory(driver_version="550.54.15", cuda_driver_version="12.4")
