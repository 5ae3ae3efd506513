"""The NVML facts only node labels use: MIG device attributes and NVLink fabric membership.

Both degrade to None where the driver or pynvml does not offer them, and both
reach the labels: the last test runs the label catalog over the fake node.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pynvml
import pytest

from devices.errors import DiscoveryError
from devices.model import Fabric, MigAttributes
from labels.catalog import compute_labels
from labels.host import NodeFacts
from labels.sharing import SharingView
from settings import MigStrategy, Sharing

from .conftest import FakeNode
from .fake_pynvml import ZERO_UUID, FakeFabric, FakeNvml

CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"
OTHER_CLUSTER = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"

Breakage = Callable[[FakeNode, pytest.MonkeyPatch], None]


def _fails(function: str, code: int) -> Breakage:
    return lambda node, _: node.nvml.fail(function, code)


def _removed(function: str) -> Breakage:
    return lambda _, monkeypatch: monkeypatch.delattr(FakeNvml, function)


def _attached(node: FakeNode, cluster: str = CLUSTER, clique: int = 7, gpu: int = 0) -> None:
    node.nvml.gpus[gpu].fabric = FakeFabric(uuid.UUID(cluster).bytes, clique)


# -- MIG attributes --------------------------------------------------------------------------


def test_mig_attributes_come_from_the_nvml_record(fake_node: FakeNode) -> None:
    fake_node.library.init()
    migs = fake_node.library.inventory().gpus[0].mig_devices
    assert [(m.profile, m.memory_mib, m.attributes) for m in migs] == [
        ("3g.20gb", 19968, MigAttributes(42, 3, 3, 3, 2, 0, 0, 0)),
        ("1g.5gb+me", 4864, MigAttributes(14, 1, 1, 1, 1, 0, 1, 1)),
    ]


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(
            _fails("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_NOT_SUPPORTED), id="not-supported"
        ),
        pytest.param(
            _fails("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
            id="driver-lacks-symbol",
        ),
        pytest.param(_removed("nvmlDeviceGetAttributes"), id="pynvml-lacks-function"),
    ],
)
def test_mig_attributes_not_offered_leave_memory_and_profile_from_memory_info(
    fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch, breakage: Breakage
) -> None:
    breakage(fake_node, monkeypatch)
    fake_node.library.init()
    migs = fake_node.library.inventory().gpus[0].mig_devices
    assert [(m.profile, m.memory_mib, m.attributes) for m in migs] == [
        ("3g.20gb", 19968, None),
        ("1g.5gb+me", 4864, None),
    ]
    assert "nvmlDeviceGetMemoryInfo" in fake_node.nvml.calls


def test_memory_info_failing_after_missing_attributes_names_the_mig_device(
    fake_node: FakeNode,
) -> None:
    fake_node.nvml.fail("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake_node.nvml.fail(
        "nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_UNKNOWN, lambda handle: handle[0] == "mig"
    )
    fake_node.library.init()
    with pytest.raises(DiscoveryError) as info:
        fake_node.library.inventory()
    assert str(info.value) == "MIG device (0, 0): nvmlDeviceGetMemoryInfo failed: Unknown Error"
    assert isinstance(info.value.__cause__, pynvml.NVMLError)


# -- fabric ----------------------------------------------------------------------------------


def test_attached_gpu_reports_its_cluster_and_clique(fake_node: FakeNode) -> None:
    _attached(fake_node, clique=(1 << 32) - 1)
    fake_node.library.init()
    gpus = fake_node.library.inventory().gpus
    assert [g.fabric for g in gpus] == [Fabric(CLUSTER, (1 << 32) - 1), None]
    assert "nvmlDeviceGetGpuFabricInfo" not in fake_node.nvml.calls  # the V query sufficed


@pytest.mark.parametrize(
    "fabric",
    [
        pytest.param(
            FakeFabric(uuid.UUID(CLUSTER).bytes, 7, state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS),
            id="registration-in-progress",
        ),
        pytest.param(
            FakeFabric(uuid.UUID(CLUSTER).bytes, 7, state=pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED),
            id="registration-not-started",
        ),
        pytest.param(
            FakeFabric(
                uuid.UUID(CLUSTER).bytes, 7, state=pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
            ),
            id="state-not-supported",
        ),
        pytest.param(
            FakeFabric(uuid.UUID(CLUSTER).bytes, 7, status=pynvml.NVML_ERROR_UNKNOWN),
            id="registration-failed",
        ),
        pytest.param(FakeFabric(ZERO_UUID, 7), id="zero-cluster-uuid"),
    ],
)
def test_gpu_whose_registration_did_not_complete_is_not_attached(
    fake_node: FakeNode, fabric: FakeFabric
) -> None:
    fake_node.nvml.gpus[0].fabric = fabric
    fake_node.library.init()
    assert [g.fabric for g in fake_node.library.inventory().gpus] == [None, None]


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(
            _fails("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
            id="driver-lacks-v",
        ),
        pytest.param(
            _fails("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH),
            id="driver-knows-another-v-version",
        ),
        pytest.param(_removed("nvmlDeviceGetGpuFabricInfoV"), id="pynvml-lacks-v"),
    ],
)
def test_without_the_versioned_query_the_original_one_answers(
    fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch, breakage: Breakage
) -> None:
    _attached(fake_node)
    breakage(fake_node, monkeypatch)
    fake_node.library.init()
    assert [g.fabric for g in fake_node.library.inventory().gpus] == [Fabric(CLUSTER, 7), None]
    assert "nvmlDeviceGetGpuFabricInfo" in fake_node.nvml.calls


@pytest.mark.parametrize(
    "breakages",
    [
        pytest.param(
            [_fails("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_NOT_SUPPORTED)],
            id="not-supported",
        ),
        pytest.param(
            [
                _fails("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
                _fails("nvmlDeviceGetGpuFabricInfo", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
            ],
            id="driver-lacks-both",
        ),
        pytest.param(
            [_removed("nvmlDeviceGetGpuFabricInfoV"), _removed("nvmlDeviceGetGpuFabricInfo")],
            id="pynvml-lacks-both",
        ),
    ],
)
def test_fabric_not_offered_means_not_attached(
    fake_node: FakeNode, monkeypatch: pytest.MonkeyPatch, breakages: list[Breakage]
) -> None:
    _attached(fake_node)
    for breakage in breakages:
        breakage(fake_node, monkeypatch)
    fake_node.library.init()
    assert [g.fabric for g in fake_node.library.inventory().gpus] == [None, None]


def test_a_failing_fabric_query_costs_only_the_clique(fake_node: FakeNode) -> None:
    # The fabric only feeds the gpu.clique label: the GPUs are still discovered.
    fake_node.nvml.fail("nvmlDeviceGetGpuFabricInfoV", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    fake_node.nvml.fail("nvmlDeviceGetGpuFabricInfo", pynvml.NVML_ERROR_NO_PERMISSION)
    fake_node.library.init()
    inventory = fake_node.library.inventory()
    assert inventory.gpus
    assert all(gpu.fabric is None for gpu in inventory.gpus)


# -- through to the labels -------------------------------------------------------------------


def _labels(node: FakeNode) -> dict[str, str]:
    node.library.init()
    return compute_labels(
        node.library.inventory(),
        NodeFacts(machine_type="Test Machine", gpu_mode="compute", vgpus=()),
        mig_strategy=MigStrategy.MIXED,
        sharing=SharingView.of(Sharing()),
        timestamp=None,
    )


def test_labels_publish_the_nvml_attributes_and_clique(fake_node: FakeNode) -> None:
    _attached(fake_node, gpu=0)
    _attached(fake_node, gpu=2)
    labels = _labels(fake_node)
    assert labels["nvidia.com/gpu.clique"] == f"{CLUSTER}.7"
    prefix = "nvidia.com/mig-3g.20gb."
    from_nvml = ("memory", "multiprocessors", "slices.gi", "slices.ci", "engines.copy",
                 "engines.decoder", "engines.encoder", "engines.jpeg", "engines.ofa")  # fmt: skip
    assert [labels[prefix + key] for key in from_nvml] == [
        "19968", "42", "3", "3", "3", "2", "0", "0", "0"
    ]  # fmt: skip
    assert labels["nvidia.com/mig-1g.5gb.me.engines.ofa"] == "1"  # "+" is not allowed in a key


def test_labels_without_attributes_or_a_shared_clique(fake_node: FakeNode) -> None:
    fake_node.nvml.fail("nvmlDeviceGetAttributes", pynvml.NVML_ERROR_NOT_SUPPORTED)
    _attached(fake_node, gpu=0)
    _attached(fake_node, cluster=OTHER_CLUSTER, gpu=2)
    labels = _labels(fake_node)
    assert "nvidia.com/gpu.clique" not in labels
    mig_keys = {k.removeprefix("nvidia.com/mig-3g.20gb.") for k in labels if "3g.20gb" in k}
    assert mig_keys == {
        "count",
        "memory",
        "product",
        "replicas",
        "sharing-strategy",
        "slices.ci",
        "slices.gi",
    }
