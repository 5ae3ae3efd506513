"""The simulated backend: profile schema errors, name resolution, init and re-reading."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from devices.backends import open_library
from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.library import DeviceLibrary
from devices.model import P2PLevel
from devices.simulated import PROFILES_DIR, SimulatedLibrary, load_profile

GPU_A = "GPU-0a0a0a0a-0000-4000-8000-000000000000"
GPU_B = "GPU-0b0b0b0b-0000-4000-8000-000000000000"
MIG_A = "MIG-1a1a1a1a-0000-4000-8000-000000000000"

BASE: dict[str, Any] = {
    "driverVersion": "550.54.15",
    "cudaDriverVersion": "12.4",
    "gpus": [
        {
            "uuid": GPU_A,
            "name": "NVIDIA A100-SXM4-40GB",
            "memoryMiB": 40960,
            "pciBusID": "00000000:07:00.0",
            "numaNode": 0,
            "computeCapability": "8.0",
        },
        {
            "uuid": GPU_B,
            "name": "NVIDIA A100-SXM4-40GB",
            "memoryMiB": 40960,
            "pciBusID": "00000000:0F:00.0",
            "numaNode": None,
            "computeCapability": "8.0",
        },
    ],
}


def profile(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def with_gpus(changes: dict[int, dict[str, Any]]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for index, change in changes.items():
        data["gpus"][index].update(change)
    return data


def with_gpu(index: int, **changes: Any) -> dict[str, Any]:
    return with_gpus({index: changes})


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def node_file(tmp_path: Path) -> Path:
    return write(tmp_path / "node.yaml", BASE)


def error_of(path: Path) -> str:
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    return str(info.value)


def test_open_library_by_name() -> None:
    library = open_library("dgx-a100")
    assert isinstance(library, SimulatedLibrary)
    assert isinstance(library, DeviceLibrary)
    assert library.name == "simulated:dgx-a100"
    assert library.path == PROFILES_DIR / "dgx-a100.yaml"


def test_users_own_file(node_file: Path) -> None:
    library = open_library(str(node_file))
    assert library.name == f"simulated:{node_file}"
    library.init()
    inventory = library.inventory()
    assert [gpu.uuid for gpu in inventory.gpus] == [GPU_A, GPU_B]
    assert [gpu.numa_node for gpu in inventory.gpus] == [0, None]
    assert [gpu.minor for gpu in inventory.gpus] == [0, 1]
    assert inventory.machine_type is None


def test_unknown_profile_name_lists_the_shipped_ones() -> None:
    library = open_library("dgx-a10")
    with pytest.raises(ProfileError) as info:
        library.init()
    assert str(info.value).startswith(
        "dgx-a10: no such node profile (shipped: a100-mig-dynamic, a100-mig-mixed,"
    )
    assert str(info.value).endswith(") and no such file")


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ProfileError, match=r"absent\.yaml: cannot read node profile: No such"):
        open_library(str(missing)).init()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(
            with_gpu(0, memoryMB=40960),
            "gpus[0].memoryMB: unknown key",
            id="unknown-gpu-key",
        ),
        pytest.param(profile(nodeName="a"), "nodeName: unknown key", id="unknown-top-key"),
        pytest.param(
            profile(driverVersion=None),
            "driverVersion: Input should be a valid string",
            id="null-driver",
        ),
        pytest.param(
            with_gpu(1, computeCapability="8"),
            "gpus[1].computeCapability: must look like \"8.0\" (got '8')",
            id="cc-no-minor",
        ),
        pytest.param(
            with_gpu(1, computeCapability=8.0),
            'gpus[1].computeCapability: must be a quoted string such as "8.0" (got 8.0)',
            id="cc-unquoted",
        ),
        pytest.param(
            profile(cudaDriverVersion=12.4),
            'cudaDriverVersion: must be a quoted string such as "12.4" (got 12.4)',
            id="cuda-unquoted",
        ),
        pytest.param(
            with_gpu(0, memoryMiB="40960"),
            "gpus[0].memoryMiB: Input should be a valid integer",
            id="memory-as-string",
        ),
        pytest.param(
            with_gpu(0, uuid="0a0a0a0a-0000"),
            "gpus[0].uuid: must start with 'GPU-' (got '0a0a0a0a-0000')",
            id="gpu-uuid-prefix",
        ),
        pytest.param(
            with_gpu(1, uuid=GPU_A),
            f"gpus[1].uuid: duplicate UUID {GPU_A} (also at gpus[0].uuid)",
            id="duplicate-uuid",
        ),
        pytest.param(
            with_gpu(1, pciBusID="00000000:07:00.0"),
            "gpus[1].pciBusID: duplicate PCI bus id 0000:07:00.0 (also at gpus[0].pciBusID)",
            id="duplicate-bus-id",
        ),
        pytest.param(
            with_gpu(1, pciBusID="07:00.0"),
            "gpus[1].pciBusID: must look like '00000000:3B:00.0' (NVML) or '0000:3b:00.0' "
            "(lspci) (got '07:00.0')",
            id="short-bus-id",
        ),
        pytest.param(
            with_gpu(1, minor=0),
            "gpus[1].minor: duplicate minor number 0 (also at gpus[0].minor)",
            id="duplicate-minor",
        ),
        pytest.param(
            with_gpu(
                0,
                migDevices=[
                    {"uuid": MIG_A, "profile": "1g.5gb", "memoryMiB": 4864, "gi": 7, "ci": 0}
                ],
            ),
            "gpus[0].migDevices: MIG devices on a GPU with migEnabled false",
            id="mig-devices-without-mig",
        ),
        pytest.param(
            with_gpu(0, migCapable=False, migEnabled=True),
            "gpus[0].migEnabled: true on a GPU with migCapable false",
            id="mig-enabled-not-capable",
        ),
        pytest.param(
            with_gpu(
                0,
                migEnabled=True,
                migDevices=[
                    {"uuid": "GPU-x", "profile": "1g.5gb", "memoryMiB": 4864, "gi": 7, "ci": 0}
                ],
            ),
            "gpus[0].migDevices[0].uuid: must start with 'MIG-' (got 'GPU-x')",
            id="mig-uuid-prefix",
        ),
        pytest.param(
            with_gpu(
                0,
                migEnabled=True,
                migDevices=[
                    {"uuid": MIG_A, "profile": "1g5gb", "memoryMiB": 4864, "gi": 7, "ci": 0}
                ],
            ),
            "gpus[0].migDevices[0].profile: not a MIG profile name such as '3g.20gb' (got '1g5gb')",
            id="mig-profile-format",
        ),
        pytest.param(
            with_gpu(
                0,
                migEnabled=True,
                migDevices=[
                    {"uuid": MIG_A, "profile": "1g.5gb", "memoryMiB": 4864, "gi": 7, "ci": 0},
                    {"uuid": MIG_A + "0", "profile": "1g.5gb", "memoryMiB": 4864, "gi": 7, "ci": 0},
                ],
            ),
            "gpus[0].migDevices[1].gi: duplicate (gi, ci) (7, 0) "
            "(also at gpus[0].migDevices[0].gi)",
            id="mig-duplicate-instance",
        ),
        pytest.param(
            with_gpu(0, nvlinks={0: 4}),
            "gpus[0].nvlinks[0]: a GPU cannot link to itself",
            id="nvlink-to-self",
        ),
        pytest.param(
            with_gpu(0, nvlinks={2: 4}),
            "gpus[0].nvlinks[2]: no GPU 2: the profile has 2 GPUs",
            id="nvlink-to-missing-gpu",
        ),
        pytest.param(
            with_gpu(0, nvlinks={1: 0}),
            "gpus[0].nvlinks: lane count to GPU 1 must be positive (got 0)",
            id="nvlink-zero-lanes",
        ),
        pytest.param(
            with_gpu(0, p2p={1: "PCIE"}),
            "gpus[0].p2p[1]: Input should be 'INTERNAL', 'SINGLE', 'MULTIPLE', 'HOSTBRIDGE', "
            "'NODE' or 'SYSTEM'",
            id="p2p-unknown-level",
        ),
        pytest.param(
            with_gpu(0, healthEvents="no"),
            "gpus[0].healthEvents: Input should be a valid boolean",
            id="health-events-not-a-boolean",
        ),
        pytest.param(
            with_gpus({0: {"p2p": {1: "NODE"}}, 1: {"p2p": {0: "SYSTEM"}}}),
            "gpus[0].p2p[1]: NODE here but gpus[1].p2p[0] is SYSTEM",
            id="p2p-asymmetric",
        ),
    ],
)
def test_invalid_profile_is_one_line_naming_file_and_key(
    tmp_path: Path, data: dict[str, Any], problem: str
) -> None:
    path = write(tmp_path / "node.yaml", data)
    assert error_of(path) == f"{path}: {problem}"


def test_missing_required_key(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    del data["gpus"][0]["numaNode"]
    path = write(tmp_path / "node.yaml", data)
    assert error_of(path) == f"{path}: gpus[0].numaNode: required key is missing"


def test_many_problems_stay_on_one_line(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE)
    for gpu in data["gpus"]:
        gpu.update(extra1=1, extra2=2, extra3=3)
    message = error_of(write(tmp_path / "node.yaml", data))
    assert "\n" not in message
    assert message.endswith("; and 1 more")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("gpus: [\n", "not valid YAML at line 2: expected the node content", id="yaml"),
        pytest.param(
            "gpus: []\ngpus: []\n", "not valid YAML at line 2: duplicate key 'gpus'", id="dup"
        ),
        pytest.param("- a\n", "(top level): must be a mapping of keys", id="list"),
        pytest.param("", "(top level): must be a mapping of keys", id="empty"),
    ],
)
def test_unreadable_yaml(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    message = error_of(path)
    assert message.startswith(f"{path}: {problem}")
    assert "\n" not in message


def test_links_stated_once_are_mirrored(tmp_path: Path) -> None:
    path = write(tmp_path / "node.yaml", with_gpu(0, nvlinks={1: 6}, p2p={1: "SINGLE"}))
    library = SimulatedLibrary(path)
    library.init()
    a, b = library.inventory().gpus
    assert (dict(a.nvlinks), dict(b.nvlinks)) == ({1: 6}, {0: 6})
    assert (dict(a.p2p), dict(b.p2p)) == ({1: P2PLevel.SINGLE}, {0: P2PLevel.SINGLE})


def test_mig_defaults_and_capability_minors(tmp_path: Path) -> None:
    mig = {"uuid": MIG_A, "profile": "3g.20gb", "memoryMiB": 19968, "gi": 1, "ci": 0}
    path = write(
        tmp_path / "node.yaml",
        with_gpu(
            0,
            minor=4,
            migEnabled=True,
            migDevices=[mig, {**mig, "uuid": MIG_A + "1", "gi": 2, "slot": 5}],
        ),
    )
    library = SimulatedLibrary(path)
    library.init()
    gpu = library.inventory().gpus[0]
    assert (gpu.mig_capable, gpu.mig_enabled) == (True, True)
    # Capability minors follow the parent's minor number (4), not its index (0):
    # the driver gives each GPU 135 minors after the first 3 and each GI 9 of them.
    assert [(m.index, m.gi_cap_minor, m.ci_cap_minor) for m in gpu.mig_devices] == [
        ("0:0", 552, 553),
        ("0:5", 561, 562),
    ]


def test_init_error_fails_init(tmp_path: Path) -> None:
    path = write(tmp_path / "node.yaml", profile(initError="Driver Not Loaded"))
    library = SimulatedLibrary(path)
    with pytest.raises(NvmlUnavailable, match=r"^Driver Not Loaded$"):
        library.init()
    with pytest.raises(DiscoveryError, match="before init"):
        library.inventory()


def test_file_is_reread_on_every_inventory(node_file: Path) -> None:
    library = SimulatedLibrary(node_file)
    library.init()
    assert len(library.inventory().gpus) == 2

    data = copy.deepcopy(BASE)
    data["gpus"].pop()
    data["machineType"] = "DGXA100"
    write(node_file, data)
    inventory = library.inventory()
    assert [gpu.uuid for gpu in inventory.gpus] == [GPU_A]
    assert inventory.machine_type == "DGXA100"

    write(node_file, profile(initError="GPU is lost"))
    with pytest.raises(NvmlUnavailable, match=r"^GPU is lost$"):
        library.inventory()

    node_file.write_text("gpus: 3\n")
    with pytest.raises(ProfileError, match=r"node\.yaml: driverVersion: required key is missing"):
        library.inventory()


def test_broken_file_fails_init_not_later(tmp_path: Path) -> None:
    path = write(tmp_path / "node.yaml", profile(gpus="none"))
    library = SimulatedLibrary(path)
    with pytest.raises(ProfileError, match=r"gpus: Input should be a valid list"):
        library.init()


def test_shutdown_ends_discovery(node_file: Path) -> None:
    library = SimulatedLibrary(node_file)
    library.init()
    library.shutdown()
    library.shutdown()
    with pytest.raises(DiscoveryError, match=r"^simulated:.*node\.yaml: inventory requested"):
        library.inventory()


def test_bad_map_key_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "node.yaml", with_gpu(0, nvlinks={"one": 2}))
    assert error_of(path) == (
        f"{path}: gpus[0].nvlinks[one] (key): Input should be a valid integer"
    )
