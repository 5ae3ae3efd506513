"""Hypothesis strategies for ResourceClaims: allocations and opaque configs, mostly wrong.

A claim reaches the DRA plugin in two parts: the kubelet names it (namespace,
name, uid) in NodePrepareResources, and the plugin reads its allocation from
the API (`status.allocation.devices`: results and opaque configs). The fuzz
varies both:

- results of our driver or another, this node's pool or another, devices
  that are free, held by another claim, unhealthy, unknown, or named with a
  hostile string; a result repeated; keys missing or of the wrong type;
- opaque configs: a valid `GpuConfig` (time-slicing at each interval, MPS
  with plausible and absurd limits), a wrong apiVersion or kind, unknown
  keys, wrong types, huge numbers, nested junk, parameters that are not an
  object, configs for other requests or drivers;
- the status itself missing, empty or of the wrong shape (unallocated);
- the kubelet's name for it: its own, a stale uid (the claim re-created),
  a claim that does not exist, empty fields, hostile strings; the claim sent
  twice in one call; a uid set at creation to a hostile string, so the
  plugin has to name a spec file after it.

`ClaimCase` is plain data; the test creates the claim in the emulated API
server and makes the kubelet's reference from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"
API_VERSION = "resource.nvidia.com/v1beta1"

# Strings a careless or hostile writer could put anywhere: empty, long, odd
# unicode, path tricks, a NUL, line breaks. All are valid UTF-8, so the
# kubelet's protobuf can carry them too.
HOSTILE: list[str] = [
    "x" * 300,
    "",
    " ",
    "ü✓🙂" * 4,
    "../../../etc/passwd",
    "..",
    ".",
    "/",
    "a/b",
    "\x00",
    "nul\x00byte",
    "\u202ertl",
    "%2F..%2Fx",
    "default/../kube-system",
    "GPU-a0bba3c3-c007-582d-8278-aefa736de776",
    "line\nbreak",
    "cr\rlf",
    "sep\u2028line",
]
HOSTILE_UIDS: list[str] = [*HOSTILE, "same-uid", "same-uid"]

# Devices of the `a100-mig-mixed` node (--mig-strategy mixed), by their part in the fuzz.
INNOCENT_DEVICES = [
    "gpu-5",
    "gpu-0-mig-1g5gb-19-0",
    "gpu-7-mig-2g10gb-14-0",
    "gpu-3-mig-7g40gb-0-0",
    "gpu-2-mig-3g20gb-9-0",
]
SICK_DEVICES = ["gpu-6", "gpu-4-mig-4g20gb-5-0", "gpu-4-mig-2g10gb-14-4", "gpu-4-mig-1g5gb-19-6"]
FREE_DEVICES = [
    "gpu-0-mig-1g5gb-19-1",
    "gpu-0-mig-1g5gb-19-2",
    "gpu-0-mig-1g5gb-19-3",
    "gpu-0-mig-1g5gb-19-4",
    "gpu-0-mig-1g5gb-19-5",
    "gpu-0-mig-1g5gb-19-6",
    "gpu-1-mig-2g10gb-14-0",
    "gpu-1-mig-2g10gb-14-2",
    "gpu-1-mig-2g10gb-14-4",
    "gpu-2-mig-3g20gb-9-4",
    "gpu-7-mig-2g10gb-14-2",
    "gpu-7-mig-1g10gb-15-4",
    "gpu-7-mig-1g5gb-me-20-6",
]
UNKNOWN_DEVICES = ["gpu-8", "gpu-99", "gpu-0-mig-9g99gb-0-0", "GPU-5", "gpu-5 ", "gpu-05", "mig"]

JUNK: list[Any] = [None, True, 0, -1, 1.5, 10**30, "", "ten", [], {}, [None], {"a": 1}]
HUGE: list[Any] = [
    10**30,
    -(10**30),
    2**63,
    2**64 + 1,
    1e308,
    -1e308,
    10**100,
    10**400,
    "1" + "0" * 400,
    "1" + "0" * 300 + "Ei",
    "x" * 5000,
    ["x"] * 2000,
]


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = {"n": value} if level % 2 else [value]
    return value


NESTED = [_deep(8), _deep(64), {"a": [{"b": [{"c": [1, 2, {"d": None}]}]}]}]

junk_values: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(JUNK + HUGE + NESTED),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=6), children, max_size=3)
        ),
        max_leaves=12,
    ),
)


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any], odds: int) -> Any:
    """`usual`, and one time in `odds` `odd` (`usual` is the simpler, for the first example)."""
    return st.integers(0, odds - 1).flatmap(lambda n: odd if n == odds - 1 else usual)


def _one_in(draw: st.DrawFn, odds: int) -> bool:
    """True one time in `odds` (False is the simpler)."""
    return draw(st.integers(0, odds - 1)) == odds - 1


hostile = st.sampled_from(HOSTILE)
request_names = _mostly(st.sampled_from(["gpu", "gpu", "other", "a", "b"]), hostile, 8)
drivers = _mostly(
    st.just(DRIVER), st.sampled_from(["other.example.com", "GPU.NVIDIA.COM", "", *HOSTILE]), 8
)
pools = _mostly(st.just(NODE), st.sampled_from(["gpu-node-2", NODE.upper(), *HOSTILE]), 10)
# Free devices most of the time, so that many claims are prepared (and collide).
ODD_DEVICES = [INNOCENT_DEVICES, SICK_DEVICES, UNKNOWN_DEVICES, HOSTILE]
device_names = st.integers(0, 9).flatmap(
    lambda n: st.sampled_from(ODD_DEVICES[n - 6] if n >= 6 else FREE_DEVICES)
)


@st.composite
def damaged_entry(draw: st.DrawFn, entry: dict[str, Any]) -> dict[str, Any]:
    """`entry` with a key dropped, a value of the wrong type, or a key added."""
    entry = dict(entry)
    key = draw(st.sampled_from(sorted(entry)))
    kind = draw(st.sampled_from(["drop", "junk", "extra"]))
    if kind == "drop":
        del entry[key]
    elif kind == "junk":
        entry[key] = draw(junk_values)
    else:
        entry[draw(st.sampled_from(["extra", "Device", "adminAccess", "tolerations"]))] = draw(
            junk_values
        )
    return entry


@st.composite
def results(draw: st.DrawFn) -> list[Any]:
    """`status.allocation.devices.results`: mostly ours, some repeated, some damaged."""
    entries: list[Any] = []
    for _ in range(0 if _one_in(draw, 10) else draw(st.integers(1, 3))):
        entry: Any = {
            "request": draw(request_names),
            "driver": draw(drivers),
            "pool": draw(pools),
            "device": draw(device_names),
        }
        if _one_in(draw, 20):
            entry = draw(damaged_entry(entry))
        if _one_in(draw, 40):
            entry = draw(junk_values)  # not an object at all
        entries.append(entry)
    if entries and _one_in(draw, 6):
        entries.append(draw(st.sampled_from(entries)))  # the same result twice
    return entries


intervals = st.sampled_from(["Default", "Default", "Short", "Medium", "Long", "default", "", 5])
quantities = _mostly(
    st.sampled_from(["10Gi", "512Mi", "1Mi", "1G", "1048576", 1048576, "1.5Gi"]),
    st.sampled_from(["1Ki", "0", "-1Gi", "lots", "99999999999999999999Ei", "1e3", *HUGE]),
    4,
)


@st.composite
def mps_config(draw: st.DrawFn) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if draw(st.booleans()):
        config["defaultActiveThreadPercentage"] = draw(
            _mostly(st.integers(0, 100), st.sampled_from([-5, 101, "50", 50.0, *HUGE]), 4)
        )
    if draw(st.booleans()):
        config["defaultPinnedDeviceMemoryLimit"] = draw(quantities)
    if draw(st.booleans()):
        config["defaultPerDevicePinnedMemoryLimit"] = draw(
            st.dictionaries(
                st.sampled_from(["0", "1", "GPU-a0bba3c3-c007-582d-8278-aefa736de776", *HOSTILE]),
                quantities,
                max_size=3,
            )
        )
    return config


@st.composite
def sharing(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["ts", "ts", "mps", "mps", "both", "none", "junk"]))
    if kind == "junk":
        return draw(junk_values)
    section: dict[str, Any] = {}
    if kind != "none":
        section["strategy"] = draw(
            st.sampled_from(["TimeSlicing", "MPS", "timeslicing", "Sliced", "", None])
            if _one_in(draw, 6)
            else st.just("MPS" if kind == "mps" else "TimeSlicing")
        )
    if kind in ("ts", "both") and draw(st.booleans()):
        section["timeSlicingConfig"] = (
            draw(junk_values) if _one_in(draw, 8) else {"interval": draw(intervals)}
        )
    if kind in ("mps", "both") and draw(st.booleans()):
        section["mpsConfig"] = draw(junk_values) if _one_in(draw, 8) else draw(mps_config())
    return section


@st.composite
def gpu_configs(draw: st.DrawFn) -> Any:
    """Opaque parameters: a GpuConfig, often valid, often wrong in one place."""
    if _one_in(draw, 20):
        return draw(junk_values)  # not an object (or an arbitrary one)
    config: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "GpuConfig"}
    if not _one_in(draw, 3):
        config["sharing"] = draw(sharing())
    for _ in range(draw(st.integers(1, 2)) if _one_in(draw, 3) else 0):
        operation = draw(st.sampled_from(["version", "kind", "unknown", "drop", "junk"]))
        if operation == "version":
            config["apiVersion"] = draw(
                st.sampled_from(["resource.nvidia.com/v1", "v1beta1", "", API_VERSION.upper(), 5])
            )
        elif operation == "kind":
            config["kind"] = draw(st.sampled_from(["MigDeviceConfig", "gpuconfig", "", None]))
        elif operation == "unknown":
            where = config.get("sharing") if isinstance(config.get("sharing"), dict) else config
            where[draw(st.sampled_from(["bogus", "Sharing", "x" * 300, "", "🙂"]))] = draw(
                junk_values
            )
        elif operation == "drop":
            config.pop(draw(st.sampled_from(["apiVersion", "kind", "sharing"])), None)
        else:
            config[draw(st.sampled_from(["apiVersion", "kind", "sharing"]))] = draw(junk_values)
    return config


@st.composite
def configs(draw: st.DrawFn) -> list[Any]:
    """`status.allocation.devices.config`: opaque configs for us or others, some damaged."""
    entries: list[Any] = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2, 3]))):
        entry: dict[str, Any] = {"source": draw(st.sampled_from(["FromClaim", "FromClass"]))}
        if draw(st.booleans()):
            entry["requests"] = draw(st.lists(request_names, max_size=2))
        entry["opaque"] = {"driver": draw(drivers), "parameters": draw(gpu_configs())}
        if _one_in(draw, 20):
            entry = draw(damaged_entry(entry))
        if _one_in(draw, 25):
            entry["opaque"] = draw(damaged_entry(entry.get("opaque") or {"driver": DRIVER}))
        entries.append(entry)
    return entries


@st.composite
def statuses(draw: st.DrawFn) -> Any:
    """A claim's status: an allocation, or (sometimes) no allocation or a broken one."""
    if _one_in(draw, 16):
        return draw(
            st.sampled_from(
                [
                    None,
                    {},
                    {"allocation": None},
                    {"allocation": {}},
                    {"allocation": []},
                    {"allocation": {"devices": None}},
                    {"allocation": {"devices": {"results": "gpu-0"}}},
                    {"allocation": {"devices": {"results": [], "config": {"a": 1}}}},
                    {"allocation": {"devices": {"results": [{}]}}},
                    "allocated",
                ]
            )
        )
    devices: dict[str, Any] = {"results": draw(results())}
    if draw(st.integers(0, 2)):
        devices["config"] = draw(configs())
    return {"allocation": {"devices": devices}}


@dataclass(frozen=True)
class ClaimCase:
    """One fuzzed claim: what the API holds, and how the kubelet names it."""

    status: Any
    namespace: str  # where it is created
    uid: str | None  # the uid it is created with (None: the server's)
    # How the kubelet names it: "own" (as created), "stale" (a new uid: the claim
    # was re-created), "absent" (no such claim), "hostile" (the three below).
    ref: str
    hostile_ref: tuple[str, str, str] = ("", "", "")  # namespace, name, uid
    twice: bool = False  # sent twice in the one call


@st.composite
def claim_cases(draw: st.DrawFn) -> ClaimCase:
    ref = draw(st.sampled_from(["own"] * 12 + ["stale", "absent", "hostile"]))
    hostile_ref = ("", "", "")
    if ref == "hostile":
        hostile_ref = (
            draw(_mostly(st.just("default"), hostile, 2)),
            draw(_mostly(st.just("missing"), hostile, 4)),
            draw(_mostly(st.uuids().map(str), st.sampled_from(HOSTILE_UIDS), 2)),
        )
    return ClaimCase(
        status=draw(statuses()),
        namespace=draw(st.sampled_from(["default", "default", "team-a"])),
        uid=draw(_mostly(st.none(), st.sampled_from(HOSTILE_UIDS), 10)),
        ref=ref,
        hostile_ref=hostile_ref,
        twice=_one_in(draw, 10),
    )
