"""Creating and destroying MIG instances on a simulated node, their state file, injected faults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from devices.backends import MIG_STATE_ENV, open_library
from devices.errors import MigError, ProfileError
from devices.model import Gpu, MigDevice
from devices.simulated import PROFILES_DIR, SimulatedLibrary
from devices.simulated_mig import simulated_mig_uuid
from tests.unit.labels.helpers import gpu_spec, mig_spec, write_profile

DYNAMIC = "a100-mig-dynamic"
MIG_1G = 19  # 1g.5gb
MIG_1G_ME = 20  # 1g.5gb+me
MIG_3G = 9  # 3g.20gb
MIG_4G = 5  # 4g.20gb
MIG_7G = 0  # 7g.40gb


def opened(profile: str | Path = DYNAMIC, state: Path | None = None) -> SimulatedLibrary:
    library = (
        SimulatedLibrary.from_argument(profile, state=state)
        if isinstance(profile, str)
        else SimulatedLibrary(profile, state=state)
    )
    library.init()
    return library


def gpu(library: SimulatedLibrary, index: int = 0) -> Gpu:
    return library.inventory().gpus[index]


def error(call: Any, *args: Any) -> str:
    with pytest.raises(MigError) as info:
        call(*args)
    assert "\n" not in str(info.value)
    return str(info.value)


def node_with_faults(tmp_path: Path, **faults: list[int]) -> Path:
    data = yaml.safe_load((PROFILES_DIR / f"{DYNAMIC}.yaml").read_text())
    data["gpus"][0]["migFaults"] = faults
    path = tmp_path / "faulty.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- creating ------------------------------------------------------------------------------


def test_a_created_instance_is_reported_as_a_declared_mig_device_would_be(tmp_path: Path) -> None:
    library = opened()
    first = gpu(library, 3)
    created = library.create_mig(first.uuid, MIG_1G, 0)
    assert created == MigDevice(
        uuid=simulated_mig_uuid(first.uuid, 1, 0),
        parent_index=3,
        slot=0,
        gi=1,
        ci=0,
        profile="1g.5gb",
        memory_mib=4864,
        gi_cap_minor=3 + (3 * 15 + 1) * 9,
        ci_cap_minor=3 + (3 * 15 + 1) * 9 + 1,
        attributes=next(p.attributes for p in first.mig_placements if p.profile_id == MIG_1G),
        profile_id=MIG_1G,
        placement_start=0,
    )
    assert gpu(library, 3).mig_devices == (created,)
    assert library.probe(created.uuid).ok  # the health machine knows it at once
    # The same instance declared in a profile reads the same, UUID aside.
    declared = write_profile(
        tmp_path / "declared.yaml",
        [gpu_spec(3, minor=3, migCapable=True, migEnabled=True, migDevices=[
            mig_spec(3, 0, "1g.5gb", 4864, gi=1, ci=0, placementStart=0)])],
    )  # fmt: skip
    (same,) = gpu(opened(declared)).mig_devices
    assert dataclasses.replace(same, uuid=created.uuid, parent_index=3) == created


def test_ids_are_the_lowest_free_and_uuids_derive_from_them() -> None:
    library = opened()
    uuid = gpu(library).uuid
    a = library.create_mig(uuid, MIG_1G, 0)
    b = library.create_mig(uuid, MIG_1G, 1)
    c = library.create_mig(uuid, MIG_3G, 4)
    assert [(m.gi, m.ci, m.slot) for m in (a, b, c)] == [(1, 0, 0), (2, 0, 1), (3, 0, 2)]
    library.destroy_mig(uuid, b.gi, b.ci)
    again = library.create_mig(uuid, MIG_1G, 2)
    assert (again.gi, again.slot) == (2, 1)
    assert again.uuid == simulated_mig_uuid(uuid, 2, 0) == b.uuid
    assert a.uuid.startswith("MIG-")
    assert len(a.uuid) == 40
    assert [m.placement_start for m in gpu(library).mig_devices] == [0, 2, 4]


def test_the_gpu_can_be_filled_as_the_hardware_allows() -> None:
    library = opened()
    uuid = gpu(library).uuid
    for start in range(7):
        library.create_mig(uuid, MIG_1G, start)
    assert len(gpu(library).mig_devices) == 7
    assert "instance" in error(library.create_mig, uuid, MIG_1G, 6)


@pytest.mark.parametrize(
    ("existing", "wanted", "message"),
    [
        pytest.param(
            [(MIG_3G, 4)],
            (MIG_1G, 5),
            "1g.5gb at memory slice 5 overlaps GPU instance 1 (3g.20gb at memory slices 4-7)",
            id="inside",
        ),
        pytest.param(
            [(MIG_1G, 3)],
            (MIG_4G, 0),
            "4g.20gb at memory slices 0-3 overlaps GPU instance 1 (1g.5gb at memory slice 3)",
            id="around",
        ),
        pytest.param(
            [(MIG_1G, 6)],
            (MIG_7G, 0),
            "7g.40gb at memory slices 0-7 overlaps GPU instance 1 (1g.5gb at memory slice 6)",
            id="whole-gpu",
        ),
        pytest.param(
            [(MIG_1G_ME, 0)],
            (MIG_1G_ME, 3),
            "1g.5gb+me (profile id 20) allows 1 instance at once and has 1",
            id="instance-limit",
        ),
    ],
)
def test_a_placement_that_is_taken_is_refused(
    existing: list[tuple[int, int]], wanted: tuple[int, int], message: str
) -> None:
    library = opened()
    uuid = gpu(library).uuid
    for profile_id, start in existing:
        library.create_mig(uuid, profile_id, start)
    before = library.inventory()
    assert error(library.create_mig, uuid, *wanted) == f"GPU {uuid}: {message}"
    assert library.inventory() == before


def test_the_slices_of_declared_mig_devices_are_taken_too() -> None:
    library = opened("a100-mig-mixed")
    fifth = gpu(library, 4)  # 4g.20gb at 0, 2g.10gb at 4, 1g.5gb at 6: slice 7 is free
    assert error(library.create_mig, fifth.uuid, MIG_1G, 5) == (
        f"GPU {fifth.uuid}: 1g.5gb at memory slice 5 overlaps GPU instance 5 "
        "(2g.10gb at memory slices 4-5)"
    )
    eighth = gpu(library, 7)  # 2g.10gb at 0 and 2, 1g.10gb at 4, 1g.5gb+me at 6
    assert "overlaps GPU instance 11 (1g.10gb at memory slices 4-5)" in error(
        library.create_mig, eighth.uuid, MIG_1G, 5
    )
    # GPU 0 holds 7 x 1g.5gb as GPU instances 7-13; a new one would get id 1.
    assert "allows 7 instances at once and has 7" in error(
        library.create_mig, gpu(library).uuid, MIG_1G, 0
    )


def test_refusals_name_the_gpu_in_one_line() -> None:
    library = opened("a100-mig-mixed")
    on = gpu(library).uuid
    off = gpu(library, 5).uuid  # MIG mode off
    assert error(library.create_mig, "GPU-nope", MIG_1G, 0) == (
        "GPU GPU-nope: no such GPU on simulated:a100-mig-mixed"
    )
    assert error(library.create_mig, off, MIG_1G, 0) == f"GPU {off}: MIG mode is off"
    assert error(library.create_mig, on, 42, 0) == (
        f"GPU {on}: no GPU-instance profile id 42 (offered: 0, 5, 9, 14, 15, 19, 20)"
    )
    assert error(library.create_mig, on, MIG_3G, 2) == (
        f"GPU {on}: 3g.20gb (profile id 9) cannot start at memory slice 2 (possible starts: 0, 4)"
    )
    assert gpu(library, 5).mig_placements == ()


def test_nothing_is_created_before_init_or_on_a_gpu_without_placements(tmp_path: Path) -> None:
    library = SimulatedLibrary.from_argument(DYNAMIC)
    assert "not initialised" in error(library.create_mig, "GPU-x", MIG_1G, 0)
    t4 = write_profile(
        tmp_path / "t4.yaml", [gpu_spec(0, name="Tesla T4", migCapable=True, migEnabled=True)]
    )
    library = opened(t4)
    assert error(library.create_mig, gpu(library).uuid, MIG_1G, 0).endswith(
        "no GPU-instance profile id 19 (offered: none)"
    )


# -- destroying ----------------------------------------------------------------------------


def test_destroy_removes_the_instance_and_frees_its_slices() -> None:
    library = opened()
    uuid = gpu(library).uuid
    mig = library.create_mig(uuid, MIG_7G, 0)
    library.destroy_mig(uuid, mig.gi, mig.ci)
    assert gpu(library).mig_devices == ()
    assert not library.probe(mig.uuid).ok
    library.create_mig(uuid, MIG_3G, 0)


def test_destroying_what_is_gone_is_not_an_error() -> None:
    library = opened()
    uuid = gpu(library).uuid
    mig = library.create_mig(uuid, MIG_1G, 0)
    library.destroy_mig(uuid, mig.gi, mig.ci)
    library.destroy_mig(uuid, mig.gi, mig.ci)  # a retry after a crash
    library.destroy_mig(uuid, 9, 0)  # never made
    library.destroy_mig("GPU-gone", 1, 0)  # the GPU left the node


def test_destroy_refuses_a_compute_instance_it_does_not_have_and_declared_devices() -> None:
    library = opened("a100-mig-mixed")
    third = gpu(library, 2).uuid  # 3g.20gb declared as GPU instances 1 and 2
    assert error(library.destroy_mig, third, 1, 0).startswith(
        f"GPU {third}: GPU instance 1 / compute instance 0 is declared by the node profile "
    )
    dynamic = opened()
    first = gpu(dynamic).uuid
    made = dynamic.create_mig(first, MIG_1G, 0)
    assert error(dynamic.destroy_mig, first, made.gi, 3) == (
        f"GPU {first}: cannot destroy GPU instance 1: its compute instance 0 is still in it "
        "(In use by another client)"
    )


# -- the state file --------------------------------------------------------------------------


def test_instances_survive_a_restart_on_the_same_state_file(tmp_path: Path) -> None:
    state = tmp_path / "mig-state.json"
    first = opened(state=state)
    uuid = gpu(first).uuid
    kept = first.create_mig(uuid, MIG_3G, 0)
    gone = first.create_mig(uuid, MIG_1G, 4)
    first.destroy_mig(uuid, gone.gi, gone.ci)
    first.shutdown()
    again = opened(state=state)
    assert gpu(again).mig_devices == (kept,)
    assert again.probe(kept.uuid).ok
    document = json.loads(state.read_text())
    assert document["version"] == 1
    assert document["gpus"][uuid] == {
        "creates": 2,
        "destroys": 1,
        "instances": [{"gi": 1, "ci": 0, "profileId": 9, "start": 0, "slot": 0}],
    }
    assert [p.name for p in tmp_path.iterdir()] == ["mig-state.json"]  # no temp file left
    # Another process opening the same node (the labeller) sees them as well.
    labeller = open_library(DYNAMIC, environ={MIG_STATE_ENV: str(state)})
    labeller.init()
    assert labeller.inventory().gpus[0].mig_devices == (kept,)


def test_without_a_state_file_instances_live_in_the_library() -> None:
    first = opened()
    first.create_mig(gpu(first).uuid, MIG_1G, 0)
    assert gpu(opened()).mig_devices == ()
    unset = open_library(DYNAMIC, environ={})
    assert isinstance(unset, SimulatedLibrary)
    assert unset.state_path is None


def test_a_missing_or_empty_state_file_is_a_node_without_instances(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    assert gpu(opened(state=state)).mig_devices == ()
    state.write_text("")
    assert gpu(opened(state=state)).mig_devices == ()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param("{not json", "Expecting property name enclosed in double quotes", id="json"),
        pytest.param('{"version": 2, "gpus": {}}', "version 2 (this plugin reads 1)", id="version"),
        pytest.param("[]", "the file must be an object (got list)", id="list"),
        pytest.param(
            '{"version": 1, "gpus": {"GPU-a": {"instances": [{"gi": 1}]}}}',
            "gpus[GPU-a].instances[0]: missing key 'ci'",
            id="missing-key",
        ),
        pytest.param(
            '{"version": 1, "gpus": {"GPU-a": {"creates": -1}}}',
            "gpus[GPU-a].creates must be a whole number of at least 0 (got -1)",
            id="negative",
        ),
        pytest.param(
            '{"version": 1, "gpus": {"GPU-a": {"instances": ['
            '{"gi": 1, "ci": 0, "profileId": 19, "start": 0, "slot": 0},'
            '{"gi": 1, "ci": 0, "profileId": 19, "start": 1, "slot": 1}]}}}',
            "gpus[GPU-a].instances[1]: GPU instance 1 is listed twice",
            id="twice",
        ),
        pytest.param('{"version": 1, "gpus": {}, "x": 1}', "the file: unknown key 'x'", id="key"),
    ],
)
def test_a_damaged_state_file_is_one_clear_error(
    tmp_path: Path, content: str, problem: str
) -> None:
    state = tmp_path / "state.json"
    library = opened(state=state)
    uuid = gpu(library).uuid
    state.write_text(content)
    with pytest.raises(ProfileError) as info:
        library.inventory()
    message = str(info.value)
    assert message.startswith(f"{state}: not a simulated MIG state file: {problem}")
    assert message.endswith("(remove it to start without MIG instances)")
    assert "\n" not in message
    assert error(library.create_mig, uuid, MIG_1G, 0) == (
        f"GPU {uuid}: cannot create a MIG device: {message}"
    )
    assert state.read_text() == content  # left for someone to look at


def test_an_unwritable_state_file_fails_the_creation(tmp_path: Path) -> None:
    state = tmp_path / "missing-directory" / "state.json"
    library = opened(state=state)
    uuid = gpu(library).uuid
    assert error(library.create_mig, uuid, MIG_1G, 0).startswith(
        "cannot write the simulated MIG state "
    )


def test_instances_of_a_gpu_that_left_mig_mode_are_gone(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    profile = tmp_path / "node.yaml"
    data = yaml.safe_load((PROFILES_DIR / f"{DYNAMIC}.yaml").read_text())
    profile.write_text(yaml.safe_dump(data))
    library = opened(profile, state=state)
    uuid = gpu(library).uuid
    mig = library.create_mig(uuid, MIG_1G, 0)
    data["gpus"][0]["migEnabled"] = False
    profile.write_text(yaml.safe_dump(data))
    assert gpu(library).mig_devices == ()
    library.destroy_mig(uuid, mig.gi, mig.ci)  # gone: not an error
    library.create_mig(gpu(library, 1).uuid, MIG_1G, 0)  # any change drops them for good
    data["gpus"][0]["migEnabled"] = True
    profile.write_text(yaml.safe_dump(data))
    assert gpu(library).mig_devices == ()


# -- injected faults ---------------------------------------------------------------------------


def test_a_compute_instance_fault_rolls_the_gpu_instance_back(tmp_path: Path) -> None:
    library = opened(node_with_faults(tmp_path, computeInstance=[2]))
    uuid = gpu(library).uuid
    first = library.create_mig(uuid, MIG_1G, 0)
    before = library.inventory()
    assert error(library.create_mig, uuid, MIG_3G, 4) == (
        f"GPU {uuid}: created GPU instance 2 (3g.20gb (profile id 9) at memory slice 4) but not "
        "its compute instance: injected fault (create 2); the GPU instance was destroyed again"
    )
    assert library.inventory() == before  # nothing is left half made
    again = library.create_mig(uuid, MIG_3G, 4)  # the third creation: its slices are free
    assert (again.gi, again.slot) == (2, 1)
    assert [m.gi for m in gpu(library).mig_devices] == [first.gi, again.gi]


def test_a_gpu_instance_fault_makes_nothing(tmp_path: Path) -> None:
    library = opened(node_with_faults(tmp_path, gpuInstance=[1]))
    uuid = gpu(library).uuid
    assert error(library.create_mig, uuid, MIG_1G, 0) == (
        f"GPU {uuid}: cannot create a GPU instance of 1g.5gb (profile id 19) at memory slice 0: "
        "injected fault (create 1): Insufficient Resources"
    )
    assert gpu(library).mig_devices == ()
    assert library.create_mig(uuid, MIG_1G, 0).gi == 1


def test_refused_requests_are_not_counted_and_other_gpus_count_apart(tmp_path: Path) -> None:
    library = opened(node_with_faults(tmp_path, computeInstance=[1]))
    uuid = gpu(library).uuid
    error(library.create_mig, uuid, 42, 0)  # refused by the checks: not a creation
    library.create_mig(gpu(library, 1).uuid, MIG_1G, 0)  # another GPU
    assert "injected fault (create 1)" in error(library.create_mig, uuid, MIG_1G, 0)
    library.create_mig(uuid, MIG_1G, 0)


def test_a_destroy_fault_leaves_the_instance_in_place(tmp_path: Path) -> None:
    library = opened(node_with_faults(tmp_path, destroy=[1]))
    uuid = gpu(library).uuid
    mig = library.create_mig(uuid, MIG_1G, 0)
    library.destroy_mig(uuid, 5, 0)  # gone: not counted
    assert error(library.destroy_mig, uuid, mig.gi, mig.ci) == (
        f"GPU {uuid}: cannot destroy compute instance 0 of GPU instance 1: injected fault "
        "(destroy 1): In use by another client"
    )
    assert gpu(library).mig_devices == (mig,)
    library.destroy_mig(uuid, mig.gi, mig.ci)
    assert gpu(library).mig_devices == ()


def test_fault_counts_carry_on_across_a_restart(tmp_path: Path) -> None:
    profile = node_with_faults(tmp_path, computeInstance=[2])
    state = tmp_path / "state.json"
    first = opened(profile, state=state)
    uuid = gpu(first).uuid
    first.create_mig(uuid, MIG_1G, 0)
    again = opened(profile, state=state)
    assert "injected fault (create 2)" in error(again.create_mig, uuid, MIG_1G, 1)


def test_faults_are_checked_by_the_schema(tmp_path: Path) -> None:
    path = write_profile(
        tmp_path / "node.yaml",
        [gpu_spec(0, migCapable=True, migEnabled=True, migFaults={"computeInstance": [0]})],
    )
    with pytest.raises(ProfileError, match=r"migFaults.computeInstance: calls are counted from 1"):
        opened(path)
