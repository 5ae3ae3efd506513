"""DRA's dynamic MIG on the NVML backend, against a fake pynvml: placements, create, destroy.

GPU 0 of the fake node is an A100-40GB in MIG mode holding a 3g.20gb at memory
slices 0-3 (GPU instance 1, slot 0) and a 1g.5gb+me at slice 6 (GPU instance
13, slot 2); slices 4, 5 and 7 are free. GPU 2 has MIG mode off.
"""

from __future__ import annotations

import pynvml
import pytest

from devices.backends import open_library
from devices.errors import DiscoveryError, MigError
from devices.model import MigAttributes, MigDevice

from .conftest import FakeNode


def said(code: int) -> str:
    """How pynvml words `code` now: some codes only through a driver loaded in this process."""
    return str(pynvml.NVMLError(code))


GPU0 = "GPU-00000000-0000-4000-8000-000000000000"
GPU2 = "GPU-22222222-0000-4000-8000-000000000000"
MIG_1G, MIG_2G, MIG_3G = 19, 14, 9


def error(call: object, *args: object) -> str:
    with pytest.raises(MigError) as info:
        call(*args)  # type: ignore[operator]
    assert "\n" not in str(info.value)
    return str(info.value)


def since(calls: list[str], mark: int) -> list[str]:
    """The calls made after `mark`, without the read-only profile lookups in between."""
    skipped = {"nvmlDeviceGetGpuInstanceProfileInfo"}
    return [c for c in calls[mark:] if c not in skipped]


# -- placements ----------------------------------------------------------------------------


def test_placements_are_read_only_where_mig_mode_is_on(fake_node: FakeNode) -> None:
    fake_node.library.init()
    gpu0, gpu2 = fake_node.library.inventory().gpus
    assert len(gpu0.mig_placements) == 25
    assert gpu0.memory_slices == 8
    assert gpu2.mig_placements == ()
    queried = [c for c in fake_node.nvml.calls if c == "nvmlDeviceGetGpuInstancePossiblePlacements"]
    assert len(queried) == 2 * 7  # the count, then the placements, for each offered profile


def test_placements_not_offered_by_the_driver_are_left_out(fake_node: FakeNode) -> None:
    fake_node.nvml.fail(
        "nvmlDeviceGetGpuInstancePossiblePlacements", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    )
    fake_node.library.init()
    gpu0 = fake_node.library.inventory().gpus[0]
    assert gpu0.mig_placements == ()
    assert len(gpu0.mig_devices) == 2  # the rest of discovery is unchanged


def test_one_profile_without_placements_leaves_only_its_own_out(fake_node: FakeNode) -> None:
    del fake_node.nvml.gpus[0].placements[20]  # NOT_SUPPORTED for 1g.5gb+me
    fake_node.library.init()
    profiles = {p.profile for p in fake_node.library.inventory().gpus[0].mig_placements}
    assert "1g.5gb+me" not in profiles
    assert "1g.5gb" in profiles


def test_a_failing_placement_query_fails_discovery_naming_the_gpu(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlDeviceGetGpuInstancePossiblePlacements", pynvml.NVML_ERROR_UNKNOWN)
    fake_node.library.init()
    with pytest.raises(DiscoveryError) as info:
        fake_node.library.inventory()
    assert str(info.value) == (
        "GPU 0 (00000000:07:00.0): nvmlDeviceGetGpuInstancePossiblePlacements failed: Unknown Error"
    )


# -- creating ------------------------------------------------------------------------------


def test_create_makes_a_gpu_instance_at_the_placement_and_a_compute_instance_spanning_it(
    fake_node: FakeNode,
) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    mark = len(nvml.calls)
    created = library.create_mig(GPU0, MIG_2G, 4)
    assert since(nvml.calls, mark)[:8] == [
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetGpuInstancePossiblePlacements",  # the count
        "nvmlDeviceGetGpuInstancePossiblePlacements",  # the placements: 4 is {4}:2
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceGetInfo",
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        "nvmlGpuInstanceGetComputeInstanceProfileInfo",  # 1 slice, then 2: the GPU instance's
    ]
    assert "nvmlGpuInstanceCreateComputeInstance" in since(nvml.calls, mark)
    assert nvml.writes == [("create gi", 0, 2), ("create ci", 0, 2, 0)]
    assert created == MigDevice(
        uuid="MIG-fake-0-2-0",
        parent_index=0,
        slot=1,
        gi=2,
        ci=0,
        profile="2g.10gb",
        memory_mib=9984,
        gi_cap_minor=None,  # the fixture's minors file lists GPU instances 1 and 13 only
        ci_cap_minor=None,
        attributes=MigAttributes(
            multiprocessors=28, gi_slices=2, ci_slices=2, copy_engines=2, decoders=1,
            encoders=0, jpegs=0, ofas=0,
        ),
        profile_id=MIG_2G,
        placement_start=4,
    )  # fmt: skip
    # Exactly what discovery reports for it from now on.
    assert created in library.inventory().gpus[0].mig_devices


def test_the_placement_is_passed_with_its_size(fake_node: FakeNode) -> None:
    seen: list[tuple[object, ...]] = []
    fake_node.nvml.fail(
        "nvmlDeviceCreateGpuInstanceWithPlacement", 0, lambda *args: bool(seen.append(args))
    )
    library = fake_node.library
    library.init()
    one = library.create_mig(GPU0, MIG_1G, 5)  # 1g.5gb: one memory slice
    library.destroy_mig(GPU0, one.gi, one.ci)
    library.create_mig(GPU0, 15, 4)  # 1g.10gb: two
    assert seen == [(("gpu", 0), MIG_1G, 5, 1), (("gpu", 0), 15, 4, 2)]


def test_a_failing_compute_instance_rolls_the_gpu_instance_back(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    nvml.fail("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    library.init()
    before = library.inventory()
    assert error(library.create_mig, GPU0, MIG_1G, 5) == (
        f"GPU {GPU0}: nvmlGpuInstanceCreateComputeInstance failed: "
        f"{said(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)}; "
        "GPU instance 2 destroyed again"
    )
    assert nvml.writes == [("create gi", 0, 2), ("destroy gi", 0, 2)]
    assert nvml.calls[-1] == "nvmlGpuInstanceDestroy"
    assert nvml.gpus[0].bare_gis == {}
    assert library.inventory() == before


def test_a_rollback_that_fails_too_says_so(fake_node: FakeNode) -> None:
    nvml = fake_node.nvml
    nvml.fail("nvmlGpuInstanceCreateComputeInstance", pynvml.NVML_ERROR_UNKNOWN)
    nvml.fail("nvmlGpuInstanceDestroy", pynvml.NVML_ERROR_NO_PERMISSION)
    fake_node.library.init()
    assert error(fake_node.library.create_mig, GPU0, MIG_1G, 5).endswith(
        "Unknown Error; GPU instance 2 could not be destroyed again: nvmlGpuInstanceDestroy "
        "failed: Insufficient Permissions"
    )


def test_a_new_device_that_cannot_be_read_is_destroyed_again(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    nvml.fail("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_UNKNOWN)
    message = error(library.create_mig, GPU0, MIG_1G, 5)
    assert message == (
        f"GPU {GPU0}: reading the new MIG device: MIG device (0, 0): nvmlDeviceGetAttributes "
        "failed: Unknown Error; the new instance was destroyed again"
    )
    assert nvml.writes[-2:] == [("destroy ci", 0, 2, 0), ("destroy gi", 0, 2)]
    assert set(nvml.gpus[0].migs) == {0, 2}


@pytest.mark.parametrize(
    ("gpu", "profile_id", "start", "message"),
    [
        pytest.param("GPU-nope", MIG_1G, 0, "GPU GPU-nope: no such GPU", id="unknown-gpu"),
        pytest.param(GPU2, MIG_1G, 0, f"GPU {GPU2}: MIG mode is off", id="mig-off"),
        pytest.param(
            GPU0,
            42,
            0,
            f"GPU {GPU0}: no GPU-instance profile id 42 (offered: 0, 5, 9, 14, 15, 19, 20)",
            id="unknown-profile",
        ),
        pytest.param(
            GPU0,
            MIG_3G,
            2,
            f"GPU {GPU0}: GPU-instance profile id 9 cannot start at memory slice 2 "
            "(possible starts: 0, 4)",
            id="unknown-start",
        ),
        pytest.param(
            GPU0,
            MIG_3G,
            4,
            f"GPU {GPU0}: nvmlDeviceCreateGpuInstanceWithPlacement failed: "
            "{INSUFFICIENT_RESOURCES}",
            id="taken",  # 3g.20gb at 4-7 overlaps the 1g.5gb+me at 6
        ),
    ],
)
def test_refusals_change_nothing(
    fake_node: FakeNode, gpu: str, profile_id: int, start: int, message: str
) -> None:
    fake_node.library.init()
    words = said(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
    expected = message.replace("{INSUFFICIENT_RESOURCES}", words)
    assert error(fake_node.library.create_mig, gpu, profile_id, start) == expected
    assert fake_node.nvml.writes == []


def test_nothing_is_changed_before_init(fake_node: FakeNode) -> None:
    assert "not initialised" in error(fake_node.library.create_mig, GPU0, MIG_1G, 5)
    assert "not initialised" in error(fake_node.library.destroy_mig, GPU0, 1, 0)
    assert fake_node.nvml.calls == []


def test_a_backend_that_is_not_there_refuses() -> None:
    library = open_library(None, strategy="tegra")
    assert "no device library" in error(library.create_mig, GPU0, MIG_1G, 0)
    assert "no device library" in error(library.destroy_mig, GPU0, 1, 0)


# -- destroying ----------------------------------------------------------------------------


def test_destroy_takes_the_compute_instance_then_the_gpu_instance(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    created = library.create_mig(GPU0, MIG_1G, 5)
    mark = len(nvml.calls)
    library.destroy_mig(GPU0, created.gi, created.ci)
    assert nvml.calls[mark:] == [
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetGpuInstanceById",
        "nvmlGpuInstanceGetComputeInstanceById",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
    ]
    assert nvml.writes[-2:] == [("destroy ci", 0, 2, 0), ("destroy gi", 0, 2)]
    assert [m.gi for m in library.inventory().gpus[0].mig_devices] == [1, 13]


def test_what_is_gone_is_skipped(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    library.destroy_mig(GPU0, 5, 0)  # no such GPU instance
    library.destroy_mig(GPU2, 1, 0)  # MIG mode off: NOT_FOUND from the fake
    library.destroy_mig("GPU-gone", 1, 0)  # no such GPU
    assert nvml.writes == []
    # A GPU instance whose compute instance is already gone (a crash between the two).
    nvml.gpus[0].bare_gis[4] = nvml.gpus[0].migs.pop(0)
    nvml.gpus[0].bare_gis[4].gi = 4
    library.destroy_mig(GPU0, 4, 0)
    assert nvml.writes == [("destroy gi", 0, 4)]
    assert nvml.gpus[0].bare_gis == {}


def test_a_gpu_instance_still_in_use_is_refused(fake_node: FakeNode) -> None:
    library, nvml = fake_node.library, fake_node.nvml
    library.init()
    nvml.fail("nvmlComputeInstanceDestroy", pynvml.NVML_ERROR_IN_USE)
    assert error(library.destroy_mig, GPU0, 1, 0) == (
        f"GPU {GPU0}: cannot destroy compute instance 0 of GPU instance 1: "
        f"nvmlComputeInstanceDestroy failed: {said(pynvml.NVML_ERROR_IN_USE)}"
    )
    assert nvml.writes == []
    assert nvml.calls[-1] == "nvmlComputeInstanceDestroy"  # the GPU instance was not tried
