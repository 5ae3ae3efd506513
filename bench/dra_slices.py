"""DRA's dynamic MIG ResourceSlices of a large node: how many, and how big.

No process and no server: the slices `--dra-dynamic-mig` publishes for 64
A100-40GBs in MIG mode without instances (the `a100-mig-dynamic` profile's
first GPU, 64 times: 26 devices and a counter set of 15 counters each), as
`resources.dra_partitions` and `resources.dra_slices.pack` build them, for
Kubernetes 1.35 and later (the counter sets in slices of their own, 8 a
slice; the devices 64 a slice, two GPUs') and before (each counter set in the
slice of its devices: two GPUs a slice, 30 of the 32 counters a slice may
hold). The size is the largest slice's compact JSON: what one write sends.
Without the profile the group is skipped.
"""

from __future__ import annotations

import dataclasses
import json
import time

from bench.report import Outcome, Row

GPUS = 64
PROFILE = "a100-mig-dynamic"
DRIVER = "gpu.nvidia.com"
NODE = "gpu-node-1"


def rows(gpus: int = GPUS) -> list[Row]:
    """Count and largest size of the slices of `gpus` A100s with dynamic MIG, both layouts."""
    from devices.simulated import SimulatedLibrary
    from resources.dra_partitions import partitioned_devices
    from resources.dra_slices import pack
    from resources.options import MigStrategy

    library = SimulatedLibrary.from_argument(PROFILE)
    library.init()
    inventory = library.inventory()
    model = inventory.gpus[0]
    copies = tuple(
        dataclasses.replace(model, index=i, minor=i, uuid=f"GPU-{i:08x}-0000-0000-0000-0000",
                            pci_bus_id=f"00000000:{i + 1:02X}:00.0", nvlinks={}, p2p={})
        for i in range(gpus)
    )  # fmt: skip
    started = time.perf_counter()
    partitioned = partitioned_devices(dataclasses.replace(inventory, gpus=copies), MigStrategy.NONE)
    built = [(time.perf_counter() - started) * 1000]
    found: list[Row] = []
    for apart, since in ((True, "1.35"), (False, "1.34")):
        started = time.perf_counter()
        slices = pack(partitioned.devices, driver=DRIVER, node=NODE, pool_generation=1,
                      counter_sets=partitioned.counter_sets, counters_apart=apart)  # fmt: skip
        built.append((time.perf_counter() - started) * 1000)
        largest = max(len(json.dumps(item, separators=(",", ":"))) for item in slices) / 1024
        where = "counter sets apart" if apart else "each counter set with its devices"
        found += [
            Row.single("dra_slices", f"dra.dynamic_mig_{gpus}gpu_slices_{since}", "slices",
                       float(len(slices)),
                       note=f"{len(partitioned.devices)} devices, {gpus} counter sets: {where}"),
            Row.single("dra_slices", f"dra.dynamic_mig_{gpus}gpu_slice_size_{since}", "KiB",
                       largest, note="the largest slice, compact JSON"),
        ]  # fmt: skip
    found += [
        Row.single("dra_slices", f"dra.dynamic_mig_{gpus}gpu_devices", "ms", built[0],
                   note="the devices and counter sets (the plan, on the NVML worker)"),
        Row.single("dra_slices", f"dra.dynamic_mig_{gpus}gpu_pack", "ms", max(built[1:]),
                   note="the slices of one layout (each health change, on the loop)"),
    ]  # fmt: skip
    return found


async def run(*, quick: bool) -> Outcome:
    from devices.simulated import available_profiles

    if PROFILE not in available_profiles():
        return Outcome(skipped=f"the simulated profile {PROFILE} is not in config/nodes")
    return Outcome(rows=rows())
