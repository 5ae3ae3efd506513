"""Where MIG instances can be created on a simulated GPU: built-in tables, a profile's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devices.errors import ProfileError
from devices.model import Gpu, Inventory, MigAttributes
from devices.simulated import SimulatedLibrary
from devices.simulated_parts import known_gi_profiles
from tests.unit.labels.helpers import gpu_spec, mig_spec, write_profile

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"

# NVIDIA's MIG user guide: `nvidia-smi mig -lgipp` on an A100-SXM4-40GB (the H100 80GB
# has the same sets), profile id -> (memory slices, starts).
LGIPP = {
    19: (1, (0, 1, 2, 3, 4, 5, 6)),
    20: (1, (0, 1, 2, 3, 4, 5, 6)),
    15: (2, (0, 2, 4, 6)),
    14: (2, (0, 2, 4)),
    9: (4, (0, 4)),
    5: (4, (0,)),
    0: (8, (0,)),
}


def inventory_of(path: Path) -> Inventory:
    library = SimulatedLibrary(path)
    library.init()
    return library.inventory()


def one_gpu(tmp_path: Path, **changes: Any) -> Gpu:
    return inventory_of(write_profile(tmp_path / "node.yaml", [gpu_spec(0, **changes)])).gpus[0]


@pytest.mark.parametrize(
    ("part", "counts"),
    [
        pytest.param(
            A100,
            {"1g.5gb": 7, "1g.5gb+me": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2,
             "4g.20gb": 1, "7g.40gb": 1},
            id="a100-40gb",
        ),
        pytest.param(
            H100,
            {"1g.10gb": 7, "1g.10gb+me": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2,
             "4g.40gb": 1, "7g.80gb": 1},
            id="h100-80gb",
        ),
    ],
)  # fmt: skip
def test_a_gpu_in_mig_mode_lists_every_placement_of_its_part(
    tmp_path: Path, part: str, counts: dict[str, int]
) -> None:
    memory = 40960 if part == A100 else 81559
    gpu = one_gpu(tmp_path, name=part, memoryMiB=memory, migCapable=True, migEnabled=True)
    assert Counter(p.profile for p in gpu.mig_placements) == counts
    assert gpu.memory_slices == 8
    by_id: dict[int, tuple[int, tuple[int, ...]]] = {}
    for placement in gpu.mig_placements:
        size, starts = by_id.get(placement.profile_id, (placement.size, ()))
        assert size == placement.size
        by_id[placement.profile_id] = (size, (*starts, placement.start))
    assert by_id == LGIPP
    # Sorted by profile id, then start: the order both backends report.
    keys = [(p.profile_id, p.start) for p in gpu.mig_placements]
    assert keys == sorted(keys)


def test_placements_hold_the_memory_and_engines_of_the_profile(tmp_path: Path) -> None:
    gpu = one_gpu(tmp_path, migCapable=True, migEnabled=True)
    seven = [p for p in gpu.mig_placements if p.profile == "7g.40gb"]
    assert [(p.profile_id, p.start, p.size, p.memory_mib) for p in seven] == [(0, 0, 8, 40192)]
    assert seven[0].attributes == MigAttributes(
        multiprocessors=98, gi_slices=7, ci_slices=7, copy_engines=7, decoders=5, encoders=0,
        jpegs=1, ofas=1,
    )  # fmt: skip
    media = {p.attributes for p in gpu.mig_placements if p.profile == "1g.5gb+me"}
    assert media == {
        MigAttributes(
            multiprocessors=14, gi_slices=1, ci_slices=1, copy_engines=1, decoders=1,
            encoders=0, jpegs=1, ofas=1,
        )
    }  # fmt: skip


def test_placements_agree_with_the_mig_devices_the_shipped_profiles_declare() -> None:
    library = SimulatedLibrary.from_argument("a100-mig-mixed")
    library.init()
    for gpu in library.inventory().gpus:
        by_key = {(p.profile_id, p.start): p for p in gpu.mig_placements}
        for mig in gpu.mig_devices:
            placement = by_key[(mig.profile_id, mig.placement_start)]
            assert (placement.profile, placement.memory_mib) == (mig.profile, mig.memory_mib)
            assert placement.attributes == mig.attributes


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"migCapable": True, "migEnabled": False}, id="mig-off"),
        pytest.param({"migCapable": False}, id="not-capable"),
        pytest.param(
            {"name": "Tesla T4", "migCapable": True, "migEnabled": True}, id="part-not-built-in"
        ),
    ],
)
def test_no_placements_without_mig_mode_or_a_table(tmp_path: Path, changes: dict[str, Any]) -> None:
    gpu = one_gpu(tmp_path, **changes)
    assert gpu.mig_placements == ()
    assert gpu.memory_slices == 0


RTX_PLACEMENTS = [
    {"profile": "1g.24gb", "profileId": 14, "size": 1, "starts": [3, 0, 1, 2],
     "memoryMiB": 24064},
    {"profile": "4g.96gb", "profileId": 5, "size": 4, "starts": [0], "memoryMiB": 96256,
     "attributes": {"multiprocessors": 188, "copyEngines": 4, "decoders": 4, "encoders": 4,
                    "jpegs": 4, "ofas": 1}},
]  # fmt: skip


def test_a_profile_states_placements_for_another_part(tmp_path: Path) -> None:
    gpu = one_gpu(
        tmp_path,
        name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
        memoryMiB=97887,
        migCapable=True,
        migEnabled=True,
        migPlacements=RTX_PLACEMENTS,
    )
    assert [(p.profile, p.profile_id, p.start, p.size) for p in gpu.mig_placements] == [
        ("4g.96gb", 5, 0, 4),
        ("1g.24gb", 14, 0, 1),
        ("1g.24gb", 14, 1, 1),
        ("1g.24gb", 14, 2, 1),
        ("1g.24gb", 14, 3, 1),
    ]
    assert gpu.memory_slices == 4
    # Left out: the built-in attributes of the part's profile.
    assert gpu.mig_placements[1].attributes.multiprocessors == 46
    assert gpu.mig_placements[0].attributes.ofas == 1


def test_stated_placements_replace_the_built_in_table(tmp_path: Path) -> None:
    stated = [{"profile": "7g.40gb", "profileId": 0, "size": 8, "starts": [0], "memoryMiB": 40192}]
    gpu = one_gpu(tmp_path, migCapable=True, migEnabled=True, migPlacements=stated)
    assert [p.profile for p in gpu.mig_placements] == ["7g.40gb"]


@pytest.mark.parametrize(
    ("placement", "problem"),
    [
        pytest.param(
            {"profile": "1g.6gb", "profileId": 14, "size": 1, "starts": [0], "memoryMiB": 6016},
            "gpus[0].migPlacements[0].attributes: required: the attributes of 1g.6gb on "
            "NVIDIA A100-SXM4-40GB are not built in",
            id="attributes-unknown",
        ),
        pytest.param(
            {"profile": "1c.3g.20gb", "profileId": 9, "size": 4, "starts": [0],
             "memoryMiB": 19968},
            "gpus[0].migPlacements[0].profile: not a GPU-instance profile name such as "
            "'3g.20gb' (got '1c.3g.20gb')",
            id="compute-instance-name",
        ),
        pytest.param(
            {"profile": "3g.20gb", "profileId": 9, "size": 4, "starts": [0, 0],
             "memoryMiB": 19968},
            "gpus[0].migPlacements[0].starts: a start is given twice (got [0, 0])",
            id="start-twice",
        ),
        pytest.param(
            {"profile": "3g.20gb", "profileId": 9, "size": 4, "starts": [], "memoryMiB": 19968},
            "gpus[0].migPlacements[0].starts: List should have at least 1 item after "
            "validation, not 0",
            id="no-starts",
        ),
        pytest.param(
            {"profile": "3g.20gb", "profileId": 9, "size": 4, "starts": [0, 4],
             "memoryMiB": 19968, "instances": 3},
            "gpus[0].migPlacements[0].instances: more instances than starts",
            id="more-instances-than-starts",
        ),
        pytest.param(
            {"profile": "3g.20gb", "profileId": 9, "size": 0, "starts": [0],
             "memoryMiB": 19968},
            "gpus[0].migPlacements[0].size: Input should be greater than 0",
            id="no-slices",
        ),
    ],
)  # fmt: skip
def test_stated_placements_are_checked(
    tmp_path: Path, placement: dict[str, Any], problem: str
) -> None:
    path = write_profile(
        tmp_path / "node.yaml",
        [gpu_spec(0, migCapable=True, migEnabled=True, migPlacements=[placement])],
    )
    with pytest.raises(ProfileError) as info:
        inventory_of(path)
    assert str(info.value) == f"{path}: {problem}"


def test_a_profile_id_stated_twice_and_placements_on_a_gpu_without_mig_are_errors(
    tmp_path: Path,
) -> None:
    twice = [RTX_PLACEMENTS[1], {**RTX_PLACEMENTS[1], "starts": [1]}]
    path = write_profile(
        tmp_path / "node.yaml",
        [
            gpu_spec(0, migCapable=False, migPlacements=[RTX_PLACEMENTS[1]]),
            gpu_spec(1, migCapable=True, migPlacements=twice),
        ],
    )
    with pytest.raises(ProfileError) as info:
        inventory_of(path)
    assert str(info.value) == (
        f"{path}: gpus[0].migPlacements: placements on a GPU with migCapable false; "
        "gpus[1].migPlacements[1].profileId: duplicate profile id 5 (also at "
        "gpus[1].migPlacements[0])"
    )


def test_the_built_in_tables_fit_eight_memory_slices_and_their_instance_limits() -> None:
    for part in (A100, H100):
        facts = known_gi_profiles(part)
        assert len(facts) == 7
        for profile in facts:
            assert all(s >= 0 and s + profile.size <= 8 for s in profile.starts)
            assert 1 <= profile.instances <= len(profile.starts)
    assert known_gi_profiles("Tesla T4") == ()


def test_declared_mig_devices_keep_the_placements_listed(tmp_path: Path) -> None:
    # Placements say where a profile can go, whatever is there now.
    gpu = one_gpu(
        tmp_path,
        migCapable=True,
        migEnabled=True,
        migDevices=[mig_spec(0, 0, "7g.40gb", 40192, gi=0, placementStart=0)],
    )
    assert len(gpu.mig_placements) == 25
