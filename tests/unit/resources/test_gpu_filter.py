"""The GPU filter on simulated node inventories, and what the resources built from it hold.

A GPU left out goes with its MIG devices and its replicas; the GPUs kept
keep their NVML index; entries that match nothing, a GPU in both lists and a
selection that keeps nothing come back as one-line warnings.
"""

from __future__ import annotations

from functools import cache

import pytest

from devices.backends import open_library
from devices.model import Inventory
from resources.builder import plan_resources
from resources.gpu_filter import select_gpus
from resources.options import MigStrategy, ResourceOptions, SharingOptions, SharingStrategy
from settings.gpu_selector import GpuSelector


@cache
def node(profile: str) -> Inventory:
    library = open_library(profile)
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


def selector(include: str = "", exclude: str = "") -> GpuSelector:
    return GpuSelector.of(include.split(","), exclude.split(","))


def indexes(inventory: Inventory) -> list[int]:
    return [gpu.index for gpu in inventory.gpus]


DGX_GPU3 = "GPU-184b362b-70e2-50de-b227-3a382639ed11"


def test_no_list_keeps_the_very_same_inventory() -> None:
    inventory = node("dgx-a100")
    selection = select_gpus(inventory, GpuSelector())
    assert selection.inventory is inventory
    assert selection.left_out == ()
    assert selection.warnings == ()


@pytest.mark.parametrize(
    "entry",
    ["3", DGX_GPU3, DGX_GPU3.upper(), "00000000:4E:00.0", "0000:4e:00.0", "0000:4E:00.0"],
)
def test_exclude_by_any_spelling_leaves_that_gpu_out(entry: str) -> None:
    selection = select_gpus(node("dgx-a100"), selector(exclude=entry))
    assert indexes(selection.inventory) == [0, 1, 2, 4, 5, 6, 7]
    assert [gpu.uuid for gpu in selection.left_out] == [DGX_GPU3]
    assert selection.warnings == ()


def test_include_keeps_only_the_named_gpus_with_their_own_indexes() -> None:
    selection = select_gpus(
        node("t4x4"), selector(include="GPU-274C30B2-2BEA-5C78-9D5A-34D2566CF150,0000:3c:00.0")
    )
    assert indexes(selection.inventory) == [1, 2]
    assert [gpu.index for gpu in selection.left_out] == [0, 3]


def test_exclude_applies_after_include_and_wins_with_a_warning() -> None:
    selection = select_gpus(node("t4x4"), selector(include="0,1", exclude="1,2"))
    assert indexes(selection.inventory) == [0]
    assert selection.warnings == (
        "--exclude-devices: GPU 1 (GPU-10672603-da38-5f04-99e3-c7ca4903aa60) is also in "
        "--include-devices; it is excluded",
    )


def test_entries_that_match_no_gpu_are_warnings_naming_the_list() -> None:
    selection = select_gpus(
        node("t4x4"),
        GpuSelector.of(
            ["9", "0"],
            ["GPU-00000000-0000-0000-0000-000000000000", "0000:07:00.0"],
            include_origin="command line: --include-devices",
            exclude_origin="/etc/config.yaml: flags.plugin.excludeDevices",
        ),
    )
    assert indexes(selection.inventory) == [0]
    assert selection.warnings == (
        "command line: --include-devices: index 9 matches no GPU on this node",
        "/etc/config.yaml: flags.plugin.excludeDevices: UUID "
        "GPU-00000000-0000-0000-0000-000000000000 matches no GPU on this node",
        "/etc/config.yaml: flags.plugin.excludeDevices: bus ID 0000:07:00.0 matches no GPU on "
        "this node",
    )


def test_an_include_that_selects_nothing_leaves_no_gpu_and_says_so() -> None:
    selection = select_gpus(node("t4x4"), selector(include="8"))
    assert selection.inventory.gpus == ()
    assert len(selection.left_out) == 4
    assert selection.warnings == (
        "--include-devices: index 8 matches no GPU on this node",
        "--include-devices: none of the 4 GPUs on this node is selected",
    )
    assert plan_resources(selection.inventory).resources == ()


def test_excluding_every_gpu_names_the_exclude_list() -> None:
    selection = select_gpus(node("t4x4"), selector(exclude="0,1,2,3"))
    assert selection.inventory.gpus == ()
    assert selection.warnings == ("--exclude-devices: none of the 4 GPUs on this node is selected",)


def test_a_node_without_gpus_only_warns_about_the_entries() -> None:
    selection = select_gpus(node("no-gpus"), selector(exclude="0"))
    assert selection.inventory.gpus == ()
    assert selection.warnings == ("--exclude-devices: index 0 matches no GPU on this node",)


def test_the_rest_of_the_inventory_is_kept() -> None:
    inventory = node("dgx-a100")
    kept = select_gpus(inventory, selector(exclude="0")).inventory
    assert kept.driver_version == inventory.driver_version
    assert kept.cuda_driver_version == inventory.cuda_driver_version
    assert kept.machine_type == inventory.machine_type
    assert kept.gpus == inventory.gpus[1:]


def test_whole_gpu_resource_loses_the_excluded_gpu() -> None:
    kept = select_gpus(node("dgx-a100"), selector(exclude="3")).inventory
    (gpu,) = plan_resources(kept).resources
    assert len(gpu.devices) == 7
    assert DGX_GPU3 not in {device.uuid for device in gpu.devices}
    assert gpu.links is not None
    assert DGX_GPU3 not in gpu.links.uuids  # topology scores only between GPUs on offer


def test_an_excluded_gpu_takes_all_its_replicas() -> None:
    sharing = SharingOptions(strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": 4})
    kept = select_gpus(node("dgx-a100"), selector(exclude="3")).inventory
    (gpu,) = plan_resources(kept, ResourceOptions(sharing=sharing)).resources
    assert len(gpu.devices) == 28
    assert DGX_GPU3 not in {device.gpu_uuid for device in gpu.devices}


def test_an_excluded_mig_gpu_takes_its_mig_devices_and_their_resource() -> None:
    # a100-mig-mixed: GPU 3 alone holds a 7g.40gb; GPU 0 holds seven 1g.5gb devices.
    options = ResourceOptions(mig_strategy=MigStrategy.MIXED)
    whole = plan_resources(node("a100-mig-mixed"), options)
    kept = select_gpus(node("a100-mig-mixed"), selector(exclude="0,3")).inventory
    plan = plan_resources(kept, options)
    names = {resource.name for resource in plan.resources}
    assert "nvidia.com/mig-7g.40gb" in {resource.name for resource in whole.resources}
    assert "nvidia.com/mig-7g.40gb" not in names
    one_g = plan.resource("nvidia.com/mig-1g.5gb")
    whole_one_g = whole.resource("nvidia.com/mig-1g.5gb")
    assert one_g is not None
    assert whole_one_g is not None
    assert len(whole_one_g.devices) - len(one_g.devices) == 7
    parents = {device.gpu_uuid for resource in plan.resources for device in resource.devices}
    assert parents.isdisjoint(
        {"GPU-b6b2b429-aca0-56f2-a9b6-93a71e65af3d", "GPU-92db187a-893c-5d8b-8d7d-78b703f9dbbc"}
    )


def test_single_strategy_checks_only_the_gpus_kept() -> None:
    # Under `single`, a MIG GPU beside full GPUs is refused; leaving the full ones out fixes it.
    options = ResourceOptions(mig_strategy=MigStrategy.SINGLE)
    kept = select_gpus(node("a100-mig-mixed"), selector(include="0")).inventory
    (gpu,) = plan_resources(kept, options).resources
    assert gpu.name == "nvidia.com/gpu"
    assert len(gpu.devices) == 7
