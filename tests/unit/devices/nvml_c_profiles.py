"""Node profiles, beyond the shipped ones, that the C-API tests serve through the fake NVML.

The shipped profiles have one kind of MIG parent (A100-40GB, whose MIG
attributes are known) and no NVLink fabric. These add what they lack:

- `mig_variety`: an A30 (MIG attributes unknown, so NVML is asked for memory
  instead; its profile ids are stated, as the fake driver numbers them),
  compute instances sharing one GPU instance (`1c.2g.12gb`), and an
  H100 with both sizes of 1-slice profile and a media-engine one;
- `fabric_node`: the DGX H100 with every GPU registered in one NVLink fabric.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from devices.simulated import PROFILES_DIR
from tests.unit.labels.helpers import gpu_spec, mig_spec, write_profile

CLUSTER = "7b3c2e5a-91d4-4f0e-b6a8-2c5d9e1f3a47"
CLIQUE = 32766


def mig_variety(path: Path) -> Path:
    a30 = gpu_spec(
        0,
        name="NVIDIA A30",
        memoryMiB=24576,
        migCapable=True,
        migEnabled=True,
        migDevices=[
            mig_spec(0, 0, "1g.6gb", 5952, gi=3, profileId=15, placementStart=0),
            mig_spec(0, 1, "1c.2g.12gb", 11904, gi=1, ci=0, profileId=14, placementStart=2),
            mig_spec(0, 2, "1c.2g.12gb", 11904, gi=1, ci=1, profileId=14, placementStart=2),
        ],
    )
    h100 = gpu_spec(
        1,
        name="NVIDIA H100 80GB HBM3",
        memoryMiB=81559,
        computeCapability="9.0",
        migCapable=True,
        migEnabled=True,
        migDevices=[
            mig_spec(1, 0, "1g.10gb", 9984, gi=9, placementStart=0),
            mig_spec(1, 1, "1g.20gb", 19968, gi=5, placementStart=2),
            mig_spec(1, 2, "1g.10gb+me", 9984, gi=13, placementStart=1),
            mig_spec(1, 3, "3g.40gb", 40192, gi=2, placementStart=4),
        ],
    )
    t4 = gpu_spec(2, name="Tesla T4", memoryMiB=15360, computeCapability="7.5", migCapable=False)
    return write_profile(path, [a30, h100, t4])


def fabric_node(path: Path) -> Path:
    data = yaml.safe_load((PROFILES_DIR / "dgx-h100.yaml").read_text())
    for gpu in data["gpus"]:
        gpu["fabric"] = {"clusterUUID": CLUSTER, "cliqueID": CLIQUE}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
