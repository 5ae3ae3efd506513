"""`compute_labels` on hand-built inventories: the rules one profile cannot show."""

from __future__ import annotations

from dataclasses import replace

import pytest

from devices.model import Fabric, Gpu, Inventory, MigAttributes, MigDevice, VgpuDevice
from labels.catalog import compute_labels, version_labels
from labels.errors import LabelError
from labels.host import NodeFacts
from labels.sharing import SharingView
from settings import MigStrategy, SharedResource, Sharing, SharingStrategy

A100 = "NVIDIA A100-SXM4-40GB"
T4 = "Tesla T4"
FACTS = NodeFacts(machine_type="Test Machine", gpu_mode="compute", vgpus=())
NO_SHARING = SharingView.of(Sharing())
ATTRS = MigAttributes(
    multiprocessors=14,
    gi_slices=1,
    ci_slices=1,
    copy_engines=1,
    decoders=0,
    encoders=0,
    jpegs=0,
    ofas=0,
)


def gpu(index: int, name: str = A100, **changes: object) -> Gpu:
    base = Gpu(
        index=index,
        minor=index,
        uuid=f"GPU-{index}",
        name=name,
        memory_mib=40960 if name == A100 else 15360,
        pci_bus_id=f"00000000:{index + 1:02X}:00.0",
        numa_node=0,
        compute_capability="8.0" if name == A100 else "7.5",
        mig_capable=name == A100,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def mig(parent: int, slot: int, profile: str = "1g.5gb", memory: int = 4864) -> MigDevice:
    return MigDevice(
        uuid=f"MIG-{parent}-{slot}",
        parent_index=parent,
        slot=slot,
        gi=slot + 1,
        ci=0,
        profile=profile,
        memory_mib=memory,
        attributes=ATTRS,
    )


def mig_gpu(index: int, *profiles: str, name: str = A100) -> Gpu:
    return gpu(
        index,
        name,
        mig_enabled=True,
        mig_devices=tuple(mig(index, slot, profile) for slot, profile in enumerate(profiles)),
    )


def labels_of(
    *gpus: Gpu,
    strategy: MigStrategy = MigStrategy.NONE,
    sharing: SharingView = NO_SHARING,
    facts: NodeFacts = FACTS,
    driver: str = "550.54.15",
) -> dict[str, str]:
    inventory = Inventory(driver_version=driver, cuda_driver_version="12.4", gpus=gpus)
    return compute_labels(inventory, facts, mig_strategy=strategy, sharing=sharing, timestamp=None)


NODE_LEVEL_GPU_KEYS = {"nvidia.com/gpu.machine", "nvidia.com/gpu.mode", "nvidia.com/gpu.clique"}


def gpu_keys(labels: dict[str, str]) -> dict[str, str]:
    """The ``nvidia.com/gpu`` resource's labels."""
    return {
        k: v
        for k, v in labels.items()
        if k.startswith("nvidia.com/gpu.") and k not in NODE_LEVEL_GPU_KEYS
    }


def sharing(*resources: tuple[str, int], strategy: SharingStrategy, rename: bool) -> SharingView:
    return SharingView.of(
        Sharing(
            strategy=strategy,
            rename_by_default=rename,
            resources=tuple(SharedResource(name, replicas) for name, replicas in resources),
        )
    )


# --- heterogeneous nodes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "product", "count"),
    [
        pytest.param(
            (gpu(0, T4), gpu(1), gpu(2)), "NVIDIA-A100-SXM4-40GB", "2", id="most-numerous"
        ),
        pytest.param((gpu(0, T4), gpu(1), gpu(2, T4)), "Tesla-T4", "2", id="most-numerous-first"),
        pytest.param((gpu(0, T4), gpu(1)), "Tesla-T4", "1", id="tie-lowest-index"),
        pytest.param((gpu(0), gpu(1, T4)), "NVIDIA-A100-SXM4-40GB", "1", id="tie-lowest-index-2"),
    ],
)
def test_heterogeneous_node_is_deterministic(
    gpus: tuple[Gpu, ...], product: str, count: str
) -> None:
    labels = labels_of(*gpus)
    assert labels["nvidia.com/gpu.product"] == product
    assert labels["nvidia.com/gpu.count"] == count
    # The other model's values never leak into the winner's set.
    family = "ampere" if product.startswith("NVIDIA") else "turing"
    assert labels["nvidia.com/gpu.family"] == family
    # The same inventory in another order gives the same labels.
    assert labels_of(*reversed(gpus)) == labels


def test_mig_disabled_model_wins_over_mig_enabled_model() -> None:
    labels = labels_of(mig_gpu(0, "1g.5gb"), mig_gpu(1, "1g.5gb"), gpu(2, T4))
    assert gpu_keys(labels) == {
        "nvidia.com/gpu.product": "Tesla-T4",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "15360",
        "nvidia.com/gpu.family": "turing",
        "nvidia.com/gpu.compute.major": "7",
        "nvidia.com/gpu.compute.minor": "5",
    }


def test_same_model_partly_mig_counts_both_and_takes_sharing() -> None:
    view = sharing(("nvidia.com/gpu", 2), strategy=SharingStrategy.TIME_SLICING, rename=False)
    labels = labels_of(mig_gpu(0, "1g.5gb"), gpu(1), sharing=view)
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.replicas"] == "2"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"


def test_per_gpu_replica_counts_label_the_smallest() -> None:
    # devices: [0] x 4 beside devices: [1] x 2: every GPU has at least 2.
    view = sharing(
        ("nvidia.com/gpu", 4), ("nvidia.com/gpu", 2), strategy=SharingStrategy.MPS, rename=True
    )
    labels = labels_of(gpu(0), gpu(1), sharing=view)
    assert labels["nvidia.com/gpu.replicas"] == "2"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/gpu.count"] == "2"


@pytest.mark.parametrize("enabled_first", [True, False], ids=["mig-gpu-first", "mig-gpu-last"])
def test_model_facts_come_from_a_mig_disabled_gpu(enabled_first: bool) -> None:
    # A MIG-enabled parent may report its facts differently (the reference's
    # mocks give it compute capability 0.0): the labels that describe the model
    # are read from a GPU of the same model that has MIG disabled.
    parent = replace(mig_gpu(0, "1g.5gb"), compute_capability="0.0", memory_mib=1)
    plain = gpu(1)
    labels = labels_of(*((parent, plain) if enabled_first else (plain, parent)))
    assert gpu_keys(labels) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
    }


def test_mig_enabled_only_model_reads_its_facts_from_a_mig_enabled_gpu() -> None:
    labels = labels_of(mig_gpu(0, "1g.5gb"), replace(mig_gpu(1, "1g.5gb"), memory_mib=1))
    assert labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["nvidia.com/gpu.family"] == "ampere"


def test_mig_enabled_only_model_is_not_shared() -> None:
    view = sharing(("nvidia.com/gpu", 2), strategy=SharingStrategy.TIME_SLICING, rename=False)
    labels = labels_of(mig_gpu(0, "1g.5gb"), sharing=view)
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"


# --- single strategy ------------------------------------------------------------------

INVALID = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID",
    "nvidia.com/gpu.count": "0",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "",
    "nvidia.com/gpu.memory": "0",
    # Left from the full-GPU pass.
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
}


@pytest.mark.parametrize(
    "gpus",
    [
        pytest.param((mig_gpu(0, "1g.5gb"), mig_gpu(1)), id="mig-enabled-without-devices"),
        pytest.param((mig_gpu(0, "1g.5gb"), gpu(1)), id="mig-enabled-and-disabled"),
        pytest.param((mig_gpu(0, "1g.5gb", "2g.10gb"),), id="two-profiles"),
        pytest.param((mig_gpu(0, "1g.5gb"), mig_gpu(1, "3g.20gb")), id="two-profiles-two-gpus"),
    ],
)
def test_single_strategy_invalid(gpus: tuple[Gpu, ...], logs: list[tuple[str, str]]) -> None:
    labels = labels_of(*gpus, strategy=MigStrategy.SINGLE)
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert gpu_keys(labels) == INVALID
    assert any(level == "WARNING" and "single MIG strategy" in text for level, text in logs)


def test_single_strategy_without_mig_is_none_plus_strategy() -> None:
    gpus = (gpu(0), gpu(1))
    none = labels_of(*gpus)
    single = labels_of(*gpus, strategy=MigStrategy.SINGLE)
    assert single == {**none, "nvidia.com/mig.strategy": "single"}
    assert "nvidia.com/mig.strategy" not in none


def test_single_strategy_without_attributes_keeps_slices_from_the_name() -> None:
    device = replace(mig(0, 0, "3g.20gb", 19968), attributes=None)
    labels = labels_of(gpu(0, mig_enabled=True, mig_devices=(device,)), strategy=MigStrategy.SINGLE)
    assert gpu_keys(labels) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "19968",
        "nvidia.com/gpu.slices.gi": "3",
        "nvidia.com/gpu.slices.ci": "3",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
    }


# --- mixed strategy -------------------------------------------------------------------


def test_mixed_same_profile_on_two_models_sums_and_names_the_first_parent() -> None:
    h100 = "NVIDIA H100 80GB HBM3"
    labels = labels_of(
        mig_gpu(0, "1g.10gb", name=h100),
        mig_gpu(1, "1g.10gb", "1g.10gb"),
        strategy=MigStrategy.MIXED,
    )
    assert labels["nvidia.com/mig-1g.10gb.count"] == "3"
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"


def test_mixed_ignores_mig_enabled_gpus_without_devices_and_spells_attributes() -> None:
    labels = labels_of(
        mig_gpu(0), mig_gpu(1, "1g.10gb+me", "1c.2g.10gb"), strategy=MigStrategy.MIXED
    )
    mig_keys = {k for k in labels if k.startswith("nvidia.com/mig-")}
    assert {k.rsplit(".", 1)[0] for k in mig_keys if k.endswith(".count")} == {
        "nvidia.com/mig-1g.10gb.me",
        "nvidia.com/mig-1c.2g.10gb",
    }
    assert labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb.me"
    assert len(mig_keys) == 2 * 13


def test_mixed_sharing_applies_per_mig_resource() -> None:
    view = sharing(("nvidia.com/mig-1g.5gb", 3), strategy=SharingStrategy.TIME_SLICING, rename=True)
    labels = labels_of(mig_gpu(0, "1g.5gb", "2g.10gb"), strategy=MigStrategy.MIXED, sharing=view)
    assert labels["nvidia.com/mig-1g.5gb.replicas"] == "3"
    assert labels["nvidia.com/mig-1g.5gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/mig-2g.10gb.replicas"] == "1"
    assert labels["nvidia.com/mig-2g.10gb.sharing-strategy"] == "none"


# --- sharing --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("resources", "strategy", "rename", "expected"),
    [
        pytest.param((("nvidia.com/gpu", 4),), SharingStrategy.TIME_SLICING, False,
                     ("4", "time-slicing", "Tesla-T4-SHARED"), id="time-slicing"),
        pytest.param((("nvidia.com/gpu", 4),), SharingStrategy.TIME_SLICING, True,
                     ("4", "time-slicing", "Tesla-T4"), id="renamed"),
        pytest.param((("nvidia.com/gpu", 3),), SharingStrategy.MPS, False,
                     ("3", "mps", "Tesla-T4-SHARED"), id="mps"),
        pytest.param((("nvidia.com/mig-1g.5gb", 4),), SharingStrategy.TIME_SLICING, False,
                     ("1", "none", "Tesla-T4"), id="other-resource"),
        pytest.param((("nvidia.com/gpu", 0), ("nvidia.com/gpu", 5)), SharingStrategy.TIME_SLICING,
                     False, ("5", "time-slicing", "Tesla-T4-SHARED"), id="first-positive-entry"),
        pytest.param((("nvidia.com/gpu", 1),), SharingStrategy.TIME_SLICING, False,
                     ("1", "none", "Tesla-T4"), id="one-replica-is-not-shared"),
    ],
)  # fmt: skip
def test_sharing_labels(
    resources: tuple[tuple[str, int], ...],
    strategy: SharingStrategy,
    rename: bool,
    expected: tuple[str, str, str],
) -> None:
    labels = labels_of(gpu(0, T4), sharing=sharing(*resources, strategy=strategy, rename=rename))
    assert (
        labels["nvidia.com/gpu.replicas"],
        labels["nvidia.com/gpu.sharing-strategy"],
        labels["nvidia.com/gpu.product"],
    ) == expected
    assert labels["nvidia.com/mps.capable"] == ("true" if expected[1] == "mps" else "false")


def test_mps_with_mig_enabled_fails_the_pass() -> None:
    view = sharing(("nvidia.com/gpu", 2), strategy=SharingStrategy.MPS, rename=False)
    with pytest.raises(LabelError, match=r"^MPS sharing is not supported for MIG devices"):
        labels_of(gpu(0), mig_gpu(1, "1g.5gb"), sharing=view)


# --- full-GPU details -----------------------------------------------------------------


def test_unknown_memory_and_architecture_are_left_out() -> None:
    labels = labels_of(gpu(0, memory_mib=0, compute_capability="0.0"))
    assert gpu_keys(labels) == {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }


@pytest.mark.parametrize(
    ("driver", "fields"),
    [
        pytest.param("550.54.15", ("550", "54", "15", "550.54.15"), id="three-fields"),
        pytest.param("535.06", ("535", "06", "", "535.06"), id="two-fields-leading-zero"),
        pytest.param("560.28.03", ("560", "28", "03", "560.28.03"), id="zero-kept"),
    ],
)
def test_driver_version_fields_are_text(driver: str, fields: tuple[str, ...]) -> None:
    labels = version_labels(driver, "12.4")
    assert (
        labels["nvidia.com/cuda.driver.major"],
        labels["nvidia.com/cuda.driver.minor"],
        labels["nvidia.com/cuda.driver.rev"],
        labels["nvidia.com/cuda.driver-version.full"],
    ) == fields
    assert labels["nvidia.com/cuda.driver-version.revision"] == fields[2]


@pytest.mark.parametrize("driver", ["550", "1.2.3.4", ""])
def test_malformed_driver_version_fails(driver: str) -> None:
    with pytest.raises(LabelError, match=r"does not match format X\.Y\[\.Z\]$"):
        labels_of(gpu(0), driver=driver)


def test_cuda_version_fields() -> None:
    labels = version_labels("550.54.15", "12.10")
    assert labels["nvidia.com/cuda.runtime.major"] == "12"
    assert labels["nvidia.com/cuda.runtime.minor"] == "10"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.10"


# --- clique, mode, vGPU, empty node ---------------------------------------------------

CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
OTHER = "0e7c7c1f-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("fabrics", "expected"),
    [
        pytest.param([Fabric(CLUSTER, 1), Fabric(CLUSTER, 1)], f"{CLUSTER}.1", id="one-clique"),
        pytest.param([Fabric(CLUSTER, 1), None], f"{CLUSTER}.1", id="unattached-ignored"),
        pytest.param([Fabric(CLUSTER, 1), Fabric(CLUSTER, 2)], None, id="two-cliques"),
        pytest.param([Fabric(CLUSTER, 1), Fabric(OTHER, 1)], None, id="two-clusters"),
        pytest.param([None, None], None, id="no-fabric"),
    ],
)
def test_clique(fabrics: list[Fabric | None], expected: str | None) -> None:
    labels = labels_of(*(gpu(i, fabric=fabric) for i, fabric in enumerate(fabrics)))
    assert labels.get("nvidia.com/gpu.clique") == expected


def test_vgpu_labels_come_from_the_last_vgpu() -> None:
    vgpus = (
        VgpuDevice("0000:06:00.0", "460.16", "r460_00"),
        VgpuDevice("0000:07:00.0", "550.54.16", "r550_40"),
    )
    labels = labels_of(gpu(0), facts=replace(FACTS, vgpus=vgpus))
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "550.54.16"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r550_40"


def test_a_last_vgpu_with_malformed_records_gives_presence_without_the_host_driver() -> None:
    vgpus = (
        VgpuDevice("0000:06:00.0", "460.16", "r460_00"),
        VgpuDevice("0000:07:00.0", None, None),
    )
    labels = labels_of(gpu(0), facts=replace(FACTS, vgpus=vgpus))
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert "nvidia.com/vgpu.host-driver-version" not in labels
    assert "nvidia.com/vgpu.host-driver-branch" not in labels


def test_failed_vgpu_scan_leaves_vgpu_labels_out() -> None:
    labels = labels_of(gpu(0), facts=replace(FACTS, vgpus=None))
    assert not any(key.startswith("nvidia.com/vgpu.") for key in labels)


def test_node_without_gpus_has_only_timestamp_and_vgpu(logs: list[tuple[str, str]]) -> None:
    empty = Inventory(driver_version="550.54.15", cuda_driver_version="12.4")
    for inventory in (empty, None):
        labels = compute_labels(
            inventory, FACTS, mig_strategy=MigStrategy.MIXED, sharing=NO_SHARING, timestamp=1234
        )
        assert labels == {"nvidia.com/gfd.timestamp": "1234", "nvidia.com/vgpu.present": "false"}
    only_timestamp = compute_labels(
        None, replace(FACTS, vgpus=None), mig_strategy=MigStrategy.NONE, sharing=NO_SHARING,
        timestamp=1234,
    )  # fmt: skip
    assert only_timestamp == {"nvidia.com/gfd.timestamp": "1234"}
    assert ("WARNING", "No labels generated from any source") in logs


def test_machine_type_is_sanitised_and_mode_copied() -> None:
    facts = NodeFacts(machine_type="Google Compute Engine", gpu_mode="graphics", vgpus=())
    labels = labels_of(gpu(0), facts=facts)
    assert labels["nvidia.com/gpu.machine"] == "Google-Compute-Engine"
    assert labels["nvidia.com/gpu.mode"] == "graphics"
