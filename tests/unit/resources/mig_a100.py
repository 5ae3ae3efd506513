"""An A100-SXM4-40GB with MIG mode on and no instances, as the device layer reads it.

The GPU-instance profiles and their possible placements are those of NVIDIA's
MIG user guide for the A100-40GB (`nvidia-smi mig -lgip` and `-lgipp`):
profile id, placements (first memory slice) and size in memory slices,
memory, and the engines each profile has. 8 memory slices, 7 compute slices.
"""

from __future__ import annotations

from dataclasses import replace

from devices.model import Gpu, MigAttributes, MigPlacement

from .nodes import make_gpu

# profile -> (profile id, starts, size, memory MiB, (SMs, copy, dec, enc, jpeg, ofa), slices)
A100_40GB_PROFILES: dict[str, tuple[int, tuple[int, ...], int, int, tuple[int, ...], int]] = {
    "1g.5gb": (19, (0, 1, 2, 3, 4, 5, 6), 1, 4864, (14, 1, 0, 0, 0, 0), 1),
    "1g.5gb+me": (20, (0, 1, 2, 3, 4, 5, 6), 1, 4864, (14, 1, 1, 0, 1, 1), 1),
    "1g.10gb": (15, (0, 2, 4, 6), 2, 9984, (14, 1, 1, 0, 0, 0), 1),
    "2g.10gb": (14, (0, 2, 4), 2, 9984, (28, 2, 1, 0, 0, 0), 2),
    "3g.20gb": (9, (0, 4), 4, 19968, (42, 3, 2, 0, 0, 0), 3),
    "4g.20gb": (5, (0,), 4, 19968, (56, 4, 2, 0, 0, 0), 4),
    "7g.40gb": (0, (0,), 8, 40192, (98, 7, 5, 0, 1, 1), 7),
}
PLACEMENTS_PER_GPU = sum(len(starts) for _, starts, *_ in A100_40GB_PROFILES.values())  # 25


def a100_placements() -> tuple[MigPlacement, ...]:
    placements = []
    for profile, (profile_id, starts, size, memory, engines, slices) in A100_40GB_PROFILES.items():
        sms, copy, dec, enc, jpeg, ofa = engines
        attributes = MigAttributes(
            multiprocessors=sms, gi_slices=slices, ci_slices=slices, copy_engines=copy,
            decoders=dec, encoders=enc, jpegs=jpeg, ofas=ofa,
        )  # fmt: skip
        placements += [
            MigPlacement(profile, profile_id, start, size, memory, attributes) for start in starts
        ]
    return tuple(placements)


def dynamic_gpu(index: int, **kwargs: object) -> Gpu:
    """An A100-40GB with MIG mode on, no MIG instance and every placement known."""
    gpu = make_gpu(index, migs=[], **kwargs)  # type: ignore[arg-type]
    return replace(gpu, mig_placements=a100_placements())
