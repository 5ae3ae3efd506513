"""Device lists in sharing entries accept exactly what the reference accepts.

The reference reads each item of ``sharing.*.resources[].devices`` as a
non-negative integer, or a string that is a GPU index (``ParseUint``), a MIG
index (two of those around ``:``), ``GPU-<uuid>``, ``MIG-<uuid>`` or
``MIG-GPU-<uuid>/<gi>/<ci>``, where ``<uuid>`` is anything google/uuid
parses. Anything else is a one-line error naming the entry; a valid list is
accepted without a warning and kept for the resource logic, which applies it
(the reference warns and replicates every device instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from settings import ConfigError, load_config

UUID = "b1028956-cfa2-0990-bf4a-5da9abb51763"


def config(devices: object) -> str:
    # JSON is YAML: each item reaches the loader with exactly this type.
    entry = {"name": "gpu", "replicas": 2, "devices": devices}
    return json.dumps({"version": "v1", "sharing": {"timeSlicing": {"resources": [entry]}}})


ACCEPTED = [
    pytest.param(0, id="int-index"),
    pytest.param(3.0, id="whole-float-index"),
    pytest.param("0", id="string-index"),
    pytest.param("15", id="two-digit-index"),
    pytest.param("0:1", id="mig-index"),
    pytest.param("12:3", id="mig-index-two-digits"),
    pytest.param(f"GPU-{UUID}", id="gpu-uuid"),
    pytest.param(f"GPU-{UUID.upper()}", id="gpu-uuid-upper-hex"),
    pytest.param(f"GPU-{{{UUID}}}", id="gpu-uuid-braced"),
    pytest.param(f"GPU-urn:uuid:{UUID}", id="gpu-uuid-urn"),
    pytest.param("GPU-" + UUID.replace("-", ""), id="gpu-uuid-32-hex"),
    pytest.param(f"MIG-{UUID}", id="mig-uuid"),
    pytest.param(f"MIG-GPU-{UUID}/3/0", id="mig-legacy-uuid"),
    pytest.param(str(2**64 - 1), id="largest-index"),
]

REJECTED = [
    pytest.param("GPU-", id="gpu-prefix-only"),
    pytest.param("GPU-1234", id="gpu-short"),
    pytest.param("GPU-xyz", id="gpu-not-hex"),
    pytest.param(f"GPU-{UUID[:-1]}g", id="gpu-bad-hex-digit"),
    pytest.param(f"GPU-{UUID} ", id="gpu-trailing-space"),
    pytest.param(f"gpu-{UUID}", id="gpu-lowercase-prefix"),
    pytest.param(f"GPU-{UUID[:8]}{UUID[9:]}-", id="gpu-hyphens-misplaced"),
    pytest.param(f"MIG-GPU-{UUID}", id="mig-legacy-without-instances"),
    pytest.param(f"MIG-GPU-{UUID}/3", id="mig-legacy-one-instance"),
    pytest.param(f"MIG-GPU-{UUID}/a/0", id="mig-legacy-not-a-number"),
    pytest.param("MIG-GPU-1234/1/0", id="mig-legacy-bad-gpu-uuid"),
    pytest.param(f"MIG-{UUID}/1/0", id="mig-uuid-with-instances"),
    pytest.param("-1", id="negative-string"),
    pytest.param(-1, id="negative-int"),
    pytest.param(1.5, id="fraction"),
    pytest.param("0:", id="mig-index-missing-slot"),
    pytest.param(":1", id="mig-index-missing-gpu"),
    pytest.param("0:1:2", id="mig-index-three-parts"),
    pytest.param("+1", id="signed-index"),
    pytest.param("\uff11", id="fullwidth-digit"),
    pytest.param(str(2**64), id="index-overflow"),
    pytest.param("9" * 5000, id="index-thousands-of-digits"),
    pytest.param("gpu0", id="name"),
    pytest.param("all", id="all-inside-a-list"),
    pytest.param("", id="empty"),
    pytest.param(True, id="boolean"),
    pytest.param({"uuid": UUID}, id="object"),
]


@pytest.mark.parametrize("item", ACCEPTED)
def test_accepted_silently_and_kept(item: object, write_config: Callable[[str], str]) -> None:
    path = write_config(config([item]))
    loaded = load_config([], {"CONFIG_FILE": path})
    (resource,) = loaded.sharing.resources
    assert (resource.name, resource.replicas) == ("nvidia.com/gpu", 2)
    whole = int(item) if isinstance(item, float) else item
    assert resource.devices == (whole,)
    assert not loaded.warnings


@pytest.mark.parametrize("item", REJECTED)
def test_rejected_with_one_line(item: object, write_config: Callable[[str], str]) -> None:
    path = write_config(config([f"GPU-{UUID}", item]))
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path})
    message = str(caught.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(
        f"{path}: sharing.timeSlicing.resources[0].devices: "
        "unsupported type for device in devices list: "
    )
    assert len(message) < 400  # a hostile value is not echoed at length


def test_all_and_a_count_are_kept_without_a_warning(
    write_config: Callable[[str], str],
) -> None:
    everything = load_config([], {"CONFIG_FILE": write_config(config("all"))})
    assert not everything.warnings
    assert everything.sharing.resources[0].devices == "all"
    counted = load_config([], {"CONFIG_FILE": write_config(config(2))})
    assert not counted.warnings
    assert counted.sharing.resources[0].devices == 2
