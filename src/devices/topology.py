"""How GPUs of one node connect: NVML topology levels and NVLink lane counts.

NVML reports, per NVLink lane, the PCI bus id of the device at the other end.
On boards where GPUs are wired to each other (DGX-1, HGX with bridges) that is
a GPU. On NVSwitch systems (DGX A100, DGX H100) every lane ends at a switch,
so a plain "remote is a GPU" count finds no NVLink at all and the allocator
would treat an NVSwitch node as PCIe-only (the reference plugin has exactly
this gap). Here two GPUs attached to the same switch are connected through it
with as many lanes as both of them bring to that switch, summed over switches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from devices.model import P2PLevel

# nvmlGpuTopologyLevel_t values.
NVML_TOPOLOGY_LEVELS: Mapping[int, P2PLevel] = MappingProxyType(
    {
        0: P2PLevel.INTERNAL,
        10: P2PLevel.SINGLE,
        20: P2PLevel.MULTIPLE,
        30: P2PLevel.HOSTBRIDGE,
        40: P2PLevel.NODE,
        50: P2PLevel.SYSTEM,
    }
)


def p2p_level(value: int) -> P2PLevel:
    """Map an NVML topology level to P2PLevel.

    Raises:
        ValueError: the value is not a level NVML documents.
    """
    try:
        return NVML_TOPOLOGY_LEVELS[value]
    except KeyError:
        raise ValueError(f"unknown topology level: {value}") from None


def combine_nvlinks(
    direct: Sequence[Mapping[int, int]], switched: Sequence[Mapping[str, int]]
) -> list[dict[int, int]]:
    """Lanes from each GPU to each peer, counting both direct and switched links.

    Args:
        direct: per GPU position, lanes whose far end is another GPU, by peer position.
        switched: per GPU position, lanes whose far end is an NVSwitch, by switch bus id.

    Returns:
        Per GPU position, peer position -> lanes; peers with no lanes are absent.
        The result is symmetric whenever the input is.
    """
    count = len(direct)
    if len(switched) != count:
        raise ValueError("direct and switched link lists differ in length")
    result: list[dict[int, int]] = []
    for i in range(count):
        peers: dict[int, int] = {}
        for j in range(count):
            if i == j:
                continue
            lanes = direct[i].get(j, 0)
            for switch, mine in switched[i].items():
                lanes += min(mine, switched[j].get(switch, 0))
            if lanes:
                peers[j] = lanes
        result.append(peers)
    return result
