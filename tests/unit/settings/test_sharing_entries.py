"""Several sharing entries for one resource: per-GPU replica counts, overlaps, distinctDevices.

What the file alone shows is refused when the config is loaded, one line per
pair of entries naming both; the overlaps only the node can reveal (an
index in one list, the same GPU's UUID in another) are the resource logic's
(tests/unit/resources/test_per_gpu_replicas.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from settings import ConfigError, load_config
from settings.sharing import device_ref

UUID = "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"


def sharing(*entries: dict[str, object], key: str = "timeSlicing") -> str:
    return json.dumps({"version": "v1", "sharing": {key: {"resources": list(entries)}}})


def refused(write_config: Callable[[str], str], text: str, *env: str) -> str:
    path = write_config(text)
    with pytest.raises(ConfigError) as caught:
        load_config([*env], {"CONFIG_FILE": path})
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    return message.removeprefix(f"{path}: ")


def test_disjoint_lists_with_their_own_replicas_are_kept_per_entry(
    write_config: Callable[[str], str],
) -> None:
    text = sharing(
        {"name": "gpu", "devices": [0, 1], "replicas": 4},
        {"name": "gpu", "devices": [2, 3, 4, 5, 6, 7], "replicas": 2, "distinctDevices": True},
    )
    config = load_config([], {"CONFIG_FILE": write_config(text)})
    entries = [
        (r.name, r.devices, r.replicas, r.distinct_devices) for r in config.sharing.resources
    ]
    assert entries == [
        ("nvidia.com/gpu", (0, 1), 4, None),
        ("nvidia.com/gpu", (2, 3, 4, 5, 6, 7), 2, True),
    ]
    assert [r.where for r in config.sharing.resources] == [
        "sharing.timeSlicing.resources[0]",
        "sharing.timeSlicing.resources[1]",
    ]
    assert not config.warnings


@pytest.mark.parametrize(
    ("first", "second", "detail"),
    [
        pytest.param(
            {"devices": [0, 1]},
            {"devices": [1, 2]},
            "both select device 1",
            id="same-index",
        ),
        pytest.param(
            {"devices": ["3"]},
            {"devices": [2, 3]},
            "both select device 3",
            id="index-as-text-and-number",
        ),
        pytest.param(
            {"devices": ["0:1"]},
            {"devices": ["00:01"]},
            "both select device 00:01",
            id="same-mig-index-spelt-differently",
        ),
        pytest.param(
            {"devices": [UUID]},
            {"devices": [0, UUID]},
            f"both select device {UUID}",
            id="same-uuid",
        ),
        pytest.param(
            {},
            {"devices": [2]},
            "an entry without a devices list (or with devices: all) selects every device",
            id="first-without-devices",
        ),
        pytest.param(
            {"devices": [2]},
            {"devices": "all"},
            "an entry without a devices list (or with devices: all) selects every device",
            id="second-all",
        ),
        pytest.param(
            {"devices": 2},
            {"devices": 3},
            "both counts start at the first device",
            id="two-counts",
        ),
    ],
)
def test_overlapping_entries_are_one_line_naming_both(
    write_config: Callable[[str], str],
    first: dict[str, object],
    second: dict[str, object],
    detail: str,
) -> None:
    text = sharing(
        {"name": "gpu", "replicas": 4, **first}, {"name": "gpu", "replicas": 2, **second}
    )
    assert refused(write_config, text) == (
        "sharing.timeSlicing.resources[1].devices: overlaps "
        f"sharing.timeSlicing.resources[0].devices for nvidia.com/gpu: {detail}"
    )


def test_mps_entries_are_named_under_mps(write_config: Callable[[str], str]) -> None:
    text = sharing({"name": "gpu", "replicas": 4}, {"name": "gpu", "replicas": 2}, key="mps")
    assert refused(write_config, text, "--mps-root=/run/nvidia/mps").startswith(
        "sharing.mps.resources[1].devices: overlaps sharing.mps.resources[0].devices "
        "for nvidia.com/gpu: "
    )


def test_every_overlapping_pair_is_reported(write_config: Callable[[str], str]) -> None:
    text = sharing(
        {"name": "gpu", "replicas": 4, "devices": [0]},
        {"name": "gpu", "replicas": 3, "devices": [0]},
        {"name": "mig-1g.5gb", "replicas": 2},
        {"name": "mig-1g.5gb", "replicas": 2},
    )
    path = write_config(text)
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path})
    assert [line.split(": ")[1] for line in caught.value.lines()] == [
        "sharing.timeSlicing.resources[1].devices",
        "sharing.timeSlicing.resources[3].devices",
    ]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param([0], [f"{UUID}"], id="index-and-uuid"),
        pytest.param(2, [5], id="count-and-list"),
    ],
)
def test_what_only_the_node_can_tell_apart_is_left_to_the_resource_logic(
    write_config: Callable[[str], str], first: object, second: object
) -> None:
    text = sharing(
        {"name": "gpu", "replicas": 4, "devices": first},
        {"name": "gpu", "replicas": 2, "devices": second},
    )
    config = load_config([], {"CONFIG_FILE": write_config(text)})
    assert [r.devices for r in config.sharing.resources] == [
        first if isinstance(first, int) else tuple(first),  # type: ignore[arg-type]
        second if isinstance(second, int) else tuple(second),  # type: ignore[arg-type]
    ]


def test_entries_of_different_resources_never_overlap(write_config: Callable[[str], str]) -> None:
    text = sharing({"name": "gpu", "replicas": 4}, {"name": "mig-1g.5gb", "replicas": 2})
    config = load_config([], {"CONFIG_FILE": write_config(text)})
    assert len(config.sharing.resources) == 2


def test_distinct_devices_said_differently_for_one_resource_is_refused(
    write_config: Callable[[str], str],
) -> None:
    text = sharing(
        {"name": "gpu", "replicas": 4, "devices": [0], "distinctDevices": True},
        {"name": "gpu", "replicas": 2, "devices": [1]},
        {"name": "gpu", "replicas": 2, "devices": [2], "distinctDevices": False},
    )
    assert refused(write_config, text) == (
        "sharing.timeSlicing.resources[2].distinctDevices: differs from "
        "sharing.timeSlicing.resources[0].distinctDevices for the same resource nvidia.com/gpu"
    )


@pytest.mark.parametrize("value", ["yes please", 1, None])
def test_distinct_devices_takes_a_boolean_or_nothing(
    write_config: Callable[[str], str], value: object
) -> None:
    text = sharing({"name": "gpu", "replicas": 2, "distinctDevices": value})
    if value is None:
        (entry,) = load_config([], {"CONFIG_FILE": write_config(text)}).sharing.resources
        assert entry.distinct_devices is None
        return
    assert refused(write_config, text) == (
        "sharing.timeSlicing.resources[0].distinctDevices: expected a boolean (true or false); "
        f"found {json.dumps(value)}"
    )


def test_distinct_devices_key_is_case_sensitive_like_the_other_entry_keys(
    write_config: Callable[[str], str],
) -> None:
    text = sharing({"name": "gpu", "replicas": 2, "distinctdevices": True})
    config = load_config([], {"CONFIG_FILE": write_config(text)})
    assert config.sharing.resources[0].distinct_devices is None
    assert any("distinctdevices" in warning for warning in config.warnings)


@pytest.mark.parametrize(
    ("item", "index", "uuid", "instances"),
    [
        (7, "7", None, (None, None)),
        ("007", "7", None, (None, None)),
        ("01:02", "1:2", None, (None, None)),
        (UUID, None, UUID, (None, None)),
        (
            "MIG-b1028956-cfa2-0990-bf4a-5da9abb51763",
            None,
            "MIG-b1028956-cfa2-0990-bf4a-5da9abb51763",
            (None, None),
        ),
        (f"MIG-{UUID}/3/0", None, UUID, (3, 0)),
    ],
)
def test_device_references_are_read_as_index_uuid_or_instance(
    item: str | int, index: str | None, uuid: str | None, instances: tuple[int | None, int | None]
) -> None:
    ref = device_ref(item)
    assert (ref.index, ref.uuid, (ref.gi, ref.ci)) == (index, uuid, instances)
    assert str(ref) == str(item)


@pytest.mark.parametrize("item", ["gpu0", "-1", "0:1:2", f"{UUID}/1/0", str(2**64)])
def test_what_is_no_device_reference_is_a_value_error(item: str) -> None:
    with pytest.raises(ValueError, match="not a device reference"):
        device_ref(item)


def test_an_empty_devices_list_is_refused(write_config: Callable[[str], str]) -> None:
    text = sharing({"name": "gpu", "replicas": 2, "devices": []})
    assert refused(write_config, text) == (
        "sharing.timeSlicing.resources[0].devices: devices list is empty; leave devices out "
        "(or write all) for every device"
    )
