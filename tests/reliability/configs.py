"""Hypothesis strategies for config files: the shipped examples, mutated.

Users start from the examples in `config/` and edit them, so the fuzz does
the same: pick an example, change values (plausible ones, wrong types,
out-of-range numbers), drop and invent keys, write it as YAML or JSON, and
sometimes damage the text itself (cut short, a stray character, tabs, binary
junk). Most results are still valid configs with different meanings, many
are invalid in one field, and a few are not YAML at all; the plugin must
handle each in its own way, and the test works out which is which with the
plugin's own loader. One config in five also moves the node to DRA
(`flags.plugin.kubeletApi: dra`), whatever sharing it asks for.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
EXAMPLES: dict[str, dict[str, Any]] = {
    path.name: yaml.safe_load(path.read_text()) for path in sorted((REPO / "config").glob("*.yaml"))
}

# Resource names that exist on the `a100-mig-mixed` node, and some that do not.
RESOURCE_NAMES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-2g.10gb",
    "nvidia.com/mig-3g.20gb",
    "nvidia.com/mig-7g.40gb",
    "nvidia.com/mig-9g.99gb",
    "example.com/gpu",
    "gpu",
    "",
]

JUNK: list[Any] = [None, "", -1, 0, 10**12, 1.5, "ten", [], {}, [None], {"a": 1}, "ü✓\x00"]

replicas = st.one_of(
    st.integers(min_value=1, max_value=6),
    st.sampled_from([0, -1, 10**6, "2", "two", 2.5, None, True]),
)

devices_spec = st.sampled_from(
    ["all", [0], [0, 1], [1, 2], [5, 6], [7], ["0"], [99], "some", 3, "GPU-does-not-exist", []]
)


@st.composite
def shared_resource(draw: st.DrawFn) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": draw(st.sampled_from(RESOURCE_NAMES))}
    entry["replicas"] = draw(replicas)
    if draw(st.integers(0, 3)) == 0:
        entry["devices"] = draw(devices_spec)
    if draw(st.integers(0, 4)) == 0:
        entry["rename"] = draw(st.sampled_from(["shared-gpu", "nvidia.com/other", "", "a/b/c"]))
    if draw(st.integers(0, 4)) == 0:
        entry["distinctDevices"] = draw(st.sampled_from([True, False, "yes"]))
    if draw(st.integers(0, 9)) == 0:
        entry[draw(st.sampled_from(["Name", "replica", "extra"]))] = 1
    return entry


@st.composite
def sharing_section(draw: st.DrawFn) -> dict[str, Any]:
    section: dict[str, Any] = {
        "resources": draw(st.lists(shared_resource(), min_size=0, max_size=3))
    }
    for key in ("renameByDefault", "failRequestsGreaterThanOne"):
        if draw(st.booleans()):
            section[key] = draw(st.sampled_from([True, False, "yes", 1]))
    return section


# Where values go, and what they may become there (besides JUNK).
SETTABLE: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("version",): st.sampled_from(["v1", "v2", "V1", 1]),
    ("flags", "migStrategy"): st.sampled_from(["none", "single", "mixed", "MIXED", "bogus"]),
    ("flags", "failOnInitError"): st.sampled_from([True, False, "false", "maybe"]),
    ("flags", "nvidiaDriverRoot"): st.sampled_from(["/", "/run/nvidia/driver", "relative"]),
    ("flags", "nvidiaDevRoot"): st.sampled_from(["/", "", "/dev-root"]),
    ("flags", "gdsEnabled"): st.booleans(),
    ("flags", "mofedEnabled"): st.booleans(),
    ("flags", "gdrcopyEnabled"): st.sampled_from([True, False, "on"]),
    ("flags", "deviceDiscoveryStrategy"): st.sampled_from(["auto", "nvml", "tegra", "magic"]),
    ("flags", "plugin", "passDeviceSpecs"): st.sampled_from([True, False, "true", 2]),
    ("flags", "plugin", "deviceListStrategy"): st.sampled_from(
        [
            "envvar",
            "volume-mounts",
            "cdi-annotations",
            "cdi-cri",
            ["envvar", "volume-mounts"],
            "envvar,cdi-annotations",
            "carrier-pigeon",
            [],
        ]
    ),
    ("flags", "plugin", "deviceIDStrategy"): st.sampled_from(["uuid", "index", "serial"]),
    ("flags", "plugin", "cdiAnnotationPrefix"): st.sampled_from(["cdi.k8s.io/", "x/", ""]),
    ("flags", "plugin", "sharedDevicesAllocationPolicy"): st.sampled_from(
        ["distributed", "packed", "random"]
    ),
    ("flags", "plugin", "kubeletApi"): st.sampled_from(["device-plugin", "dra", "DRA", "grpc"]),
    ("sharing", "timeSlicing"): sharing_section(),
    ("sharing", "mps"): sharing_section(),
    ("resources", "gpus"): st.sampled_from(
        [[{"pattern": "*", "name": "gpu"}], [{"pattern": "*A100*", "name": "a100"}], [{}]]
    ),
    ("resources", "mig"): st.sampled_from(
        [[{"pattern": "1g.5gb", "name": "mig-small"}], [{"pattern": "[", "name": "x"}]]
    ),
    ("imex", "channelIDs"): st.sampled_from([[0], [1], [0, 1], "0", [-1]]),
    ("imex", "required"): st.booleans(),
    ("health",): st.sampled_from([{}, {"ignoredXids": [13]}, {"bogus": 1}, []]),
}

UNKNOWN_KEYS = [("flags", "migstrategy"), ("flags", "nope"), ("sharing", "timeslicing"), ("x",)]


def _set(document: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = document
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value


def _delete(document: dict[str, Any], path: tuple[str, ...]) -> None:
    node: Any = document
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return
    node.pop(path[-1], None)


def with_kubelet_api(document: dict[str, Any], api: str) -> str:
    """An example served through `api` (`dra`, `device-plugin`), as YAML."""
    document = copy.deepcopy(document)
    _set(document, ("flags", "plugin", "kubeletApi"), api)
    return yaml.safe_dump(document, sort_keys=False)


@st.composite
def mutated_document(draw: st.DrawFn) -> dict[str, Any]:
    document = copy.deepcopy(EXAMPLES[draw(st.sampled_from(sorted(EXAMPLES)))])
    if draw(st.integers(0, 4)) == 4:  # one in five on a DRA node, its sharing then ignored
        _set(document, ("flags", "plugin", "kubeletApi"), "dra")
    paths = sorted(SETTABLE)
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        operation = draw(st.sampled_from(["set", "set", "set", "junk", "delete", "unknown"]))
        if operation == "set":
            path = draw(st.sampled_from(paths))
            _set(document, path, draw(SETTABLE[path]))
        elif operation == "junk":
            _set(document, draw(st.sampled_from(paths)), draw(st.sampled_from(JUNK)))
        elif operation == "delete":
            _delete(document, draw(st.sampled_from(paths)))
        else:
            _set(document, draw(st.sampled_from(UNKNOWN_KEYS)), draw(st.sampled_from(JUNK)))
    return document


@st.composite
def damaged(draw: st.DrawFn, text: str) -> str:
    """The text with one kind of damage a careless edit or a bad copy leaves."""
    kind = draw(st.sampled_from(["cut", "insert", "tabs", "binary", "empty", "duplicate"]))
    if kind == "cut":
        return text[: draw(st.integers(min_value=0, max_value=len(text)))]
    if kind == "insert":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        stray = draw(st.sampled_from([":", "- ", "{", "]", '"', "\n  x", "&a", "*b"]))
        return text[:at] + stray + text[at:]
    if kind == "tabs":
        return text.replace("  ", "\t")
    if kind == "binary":
        return draw(st.binary(min_size=1, max_size=64)).decode("latin-1")
    if kind == "empty":
        return draw(st.sampled_from(["", "\n", "---\n", "null\n", "[]\n", "42\n"]))
    return text + text  # every key twice


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """One config file's text, most of the time parseable."""
    document = draw(mutated_document())
    if draw(st.booleans()):
        text = yaml.safe_dump(document, sort_keys=draw(st.booleans()), allow_unicode=True)
    else:
        text = json.dumps(document, indent=draw(st.sampled_from([None, 2])))
    if draw(st.integers(min_value=0, max_value=7)) == 0:
        text = draw(damaged(text))
    return text
