"""The node profiles shipped in config/nodes/ load and describe the nodes they claim to."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

from devices.backends import open_library
from devices.errors import NvmlUnavailable
from devices.migprofile import mig_memory_gb, profile_slices
from devices.model import Inventory, P2PLevel
from devices.simulated import available_profiles

MIB = 1 << 20
A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
A100_CATALOGUE = {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}
RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
# Its GPU-instance profiles as `nvidia-smi mig -lgip` lists them: slices and max instances.
RTX_PRO_6000_CATALOGUE = {
    "1g.24gb": 4, "1g.24gb+me": 1, "1g.24gb+gfx": 4, "1g.24gb+me.all": 1, "1g.24gb-me": 4,
    "2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb+me.all": 1, "2g.48gb-me": 2,
    "4g.96gb": 1, "4g.96gb+gfx": 1,
}  # fmt: skip


def load(name: str) -> Inventory:
    library = open_library(name)
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


@dataclass(frozen=True)
class Node:
    count: int
    name: str
    memory_mib: int
    cc: str
    lanes: int  # to every peer; 0 for PCIe-only


NODES = {
    "dgx-a100": Node(8, A100, 40960, "8.0", 12),
    "dgx-h100": Node(8, H100, 81559, "9.0", 18),
    "hgx-16": Node(16, H100, 81559, "9.0", 18),
    "a100-mig-mixed": Node(8, A100, 40960, "8.0", 12),
    "a100-mig-single": Node(8, A100, 40960, "8.0", 12),
    "a100-mig-dynamic": Node(8, A100, 40960, "8.0", 12),
    "t4x4": Node(4, "Tesla T4", 15360, "7.5", 0),
}


def test_shipped_profiles() -> None:
    assert set(available_profiles()) == {
        *NODES, "no-gpus", "nvml-broken", "vgpu", "rtx-pro-6000-mig"
    }  # fmt: skip


@pytest.mark.parametrize("profile", [pytest.param(name, id=name) for name in NODES])
def test_gpus_match_the_node(profile: str) -> None:
    node = NODES[profile]
    inventory = load(profile)
    assert (inventory.driver_version, inventory.cuda_driver_version) == ("550.54.15", "12.4")
    assert [gpu.index for gpu in inventory.gpus] == list(range(node.count))
    assert [gpu.minor for gpu in inventory.gpus] == list(range(node.count))
    assert {gpu.name for gpu in inventory.gpus} == {node.name}
    assert {gpu.memory_mib for gpu in inventory.gpus} == {node.memory_mib}
    assert {gpu.compute_capability for gpu in inventory.gpus} == {node.cc}
    half = node.count // 2
    assert [gpu.numa_node for gpu in inventory.gpus] == [0] * half + [1] * half
    for gpu in inventory.gpus:
        peers = set(range(node.count)) - {gpu.index}
        expected_links = dict.fromkeys(peers, node.lanes) if node.lanes else {}
        assert dict(gpu.nvlinks) == expected_links
        assert set(gpu.p2p) == peers


@pytest.mark.parametrize("profile", [pytest.param(name, id=name) for name in NODES])
def test_topology_is_symmetric_and_follows_numa(profile: str) -> None:
    gpus = load(profile).gpus
    for gpu in gpus:
        for peer, lanes in gpu.nvlinks.items():
            assert gpus[peer].nvlinks[gpu.index] == lanes
        for peer, level in gpu.p2p.items():
            assert gpus[peer].p2p[gpu.index] is level
            if gpus[peer].numa_node != gpu.numa_node:
                assert level is P2PLevel.SYSTEM


@pytest.mark.parametrize(
    "profile", [pytest.param(n, id=n) for n in ("dgx-a100", "dgx-h100", "hgx-16")]
)
def test_nvswitch_nodes_are_node_local_within_a_socket(profile: str) -> None:
    gpus = load(profile).gpus
    for gpu in gpus:
        for peer, level in gpu.p2p.items():
            same_socket = gpus[peer].numa_node == gpu.numa_node
            assert level is (P2PLevel.NODE if same_socket else P2PLevel.SYSTEM)
        assert gpu.mig_capable
        assert not gpu.mig_enabled
        assert not gpu.mig_devices


def test_t4_pairs_share_a_pcie_switch() -> None:
    gpus = load("t4x4").gpus
    levels = {(g.index, peer): level for g in gpus for peer, level in g.p2p.items()}
    assert levels[(0, 1)] is levels[(2, 3)] is P2PLevel.SINGLE
    assert {levels[(a, b)] for a in (0, 1) for b in (2, 3)} == {P2PLevel.SYSTEM}
    assert not any(g.mig_capable for g in gpus)


def test_mig_mixed_layouts() -> None:
    gpus = load("a100-mig-mixed").gpus
    layouts = [sorted(m.profile for m in gpu.mig_devices) for gpu in gpus]
    assert layouts == [
        ["1g.5gb"] * 7,
        ["2g.10gb"] * 3,
        ["3g.20gb"] * 2,
        ["7g.40gb"],
        ["1g.5gb", "2g.10gb", "4g.20gb"],
        [],
        [],
        ["1g.10gb", "1g.5gb+me", "2g.10gb", "2g.10gb"],
    ]
    assert [gpu.mig_enabled for gpu in gpus] == [True] * 5 + [False] * 2 + [True]


def test_mig_single_layout() -> None:
    gpus = load("a100-mig-single").gpus
    assert all(gpu.mig_enabled for gpu in gpus)
    assert [[m.profile for m in gpu.mig_devices] for gpu in gpus] == [["1g.5gb"] * 7] * 8


@pytest.mark.parametrize(
    "profile", [pytest.param(n, id=n) for n in ("a100-mig-mixed", "a100-mig-single")]
)
def test_mig_layouts_fit_an_a100_40gb(profile: str) -> None:
    for gpu in load(profile).gpus:
        compute = memory = 0
        for mig in gpu.mig_devices:
            assert mig.profile in A100_CATALOGUE
            gb = mig_memory_gb(mig.memory_mib, gpu.memory_mib * MIB)
            assert mig.profile.split(".")[1].split("+")[0] == f"{gb}gb"
            compute += profile_slices(mig.profile)[0]
            memory += gb // 5  # 8 memory slices of 5 GB
        assert compute <= 7
        assert memory <= 8
        assert len({(m.gi, m.ci) for m in gpu.mig_devices}) == len(gpu.mig_devices)
        assert [m.slot for m in gpu.mig_devices] == list(range(len(gpu.mig_devices)))


def test_mig_dynamic_node_is_in_mig_mode_with_every_placement_free() -> None:
    gpus = load("a100-mig-dynamic").gpus
    assert all(gpu.mig_enabled and gpu.mig_capable for gpu in gpus)
    assert all(gpu.mig_devices == () for gpu in gpus)
    for gpu in gpus:
        counts = Counter(p.profile for p in gpu.mig_placements)
        assert counts == {
            "1g.5gb": 7, "1g.5gb+me": 7, "1g.10gb": 4, "2g.10gb": 3,
            "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1,
        }  # fmt: skip
        assert gpu.memory_slices == 8


def test_rtx_pro_6000_node_has_every_kind_of_profile_suffix_within_four_slices() -> None:
    inventory = load("rtx-pro-6000-mig")
    assert {gpu.name for gpu in inventory.gpus} == {RTX_PRO_6000}
    assert {(gpu.memory_mib, gpu.compute_capability) for gpu in inventory.gpus} == {(97887, "12.0")}
    assert [sorted(m.profile for m in gpu.mig_devices) for gpu in inventory.gpus] == [
        ["1g.24gb+gfx"] * 4,
        ["1g.24gb+me.all", "1g.24gb-me", "2g.48gb-me"],
        ["1g.24gb+gfx", "1g.24gb+me", "2g.48gb"],
        ["4g.96gb+gfx"],
    ]
    for gpu in inventory.gpus:
        assert gpu.mig_enabled
        assert not gpu.nvlinks
        for mig in gpu.mig_devices:
            assert mig.profile in RTX_PRO_6000_CATALOGUE
            gb = mig_memory_gb(mig.memory_mib, gpu.memory_mib * MIB)
            assert mig.profile.startswith(f"{profile_slices(mig.profile)[1]}g.{gb}gb")
            assert mig.attributes is not None  # the engines NVML reports for the part
            assert mig.attributes.gi_slices == profile_slices(mig.profile)[1]
        assert sum(profile_slices(m.profile)[1] for m in gpu.mig_devices) <= 4
        counts = Counter(m.profile for m in gpu.mig_devices)
        assert all(n <= RTX_PRO_6000_CATALOGUE[p] for p, n in counts.items())
        assert len({(m.gi, m.ci) for m in gpu.mig_devices}) == len(gpu.mig_devices)
        # `+me.all` takes every media engine: nothing else on its GPU may have one.
        if "1g.24gb+me.all" in counts:
            assert {m.attributes.decoders for m in gpu.mig_devices if m.attributes
                    and m.profile != "1g.24gb+me.all"} == {0}  # fmt: skip


def test_identities_are_stable_and_unique_across_profiles() -> None:
    seen: set[str] = set()
    total = 0
    for profile in [*NODES, "rtx-pro-6000-mig"]:
        first, again = load(profile), load(profile)
        assert first == again
        for gpu in first.gpus:
            ids = [gpu.uuid, *(m.uuid for m in gpu.mig_devices)]
            total += len(ids)
            seen.update(ids)
    assert len(seen) == total


def test_no_gpus_node() -> None:
    inventory = load("no-gpus")
    assert inventory.gpus == ()
    assert inventory.driver_version == "550.54.15"


def test_broken_nvml_node_fails_init() -> None:
    library = open_library("nvml-broken")
    with pytest.raises(NvmlUnavailable, match=r"^NVML could not start: .*version mismatch"):
        library.init()
