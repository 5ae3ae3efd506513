"""Golden label sets: every shipped profile under every sharing mode, exactly.

Each case runs the command in-process (``--oneshot``, fixed clock) and
compares the whole features file with the expected set: no missing key, no
extra key, every value equal. The expectations are written out per profile
from what the node is (its GPUs, driver, machine), not computed by the code
under test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.labels.helpers import NOW, run_oneshot

Labels = dict[str, str]

VERSIONS: Labels = {
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "54",
    "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
    "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "54",
    "nvidia.com/cuda.driver-version.revision": "15",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
    "nvidia.com/cuda.runtime-version.full": "12.4",
}


def node(machine: str, *, mig_capable: bool, mode: str = "compute") -> Labels:
    return {
        "nvidia.com/gfd.timestamp": str(NOW),
        "nvidia.com/gpu.machine": machine,
        **VERSIONS,
        "nvidia.com/mig.capable": "true" if mig_capable else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.mode": mode,
        "nvidia.com/vgpu.present": "false",
    }


def full_gpu(
    product: str, count: int, memory: int, family: str, cc: tuple[int, int], *, replicas: int = 1
) -> Labels:
    return {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(cc[0]),
        "nvidia.com/gpu.compute.minor": str(cc[1]),
    }


def mig(resource: str, product: str, count: int, memory: int, engines: tuple[int, ...]) -> Labels:
    """``engines``: multiprocessors, GI slices, CI slices, copy, decoder, encoder, jpeg, ofa."""
    suffixes = (
        "multiprocessors",
        "slices.gi",
        "slices.ci",
        *(f"engines.{name}" for name in ("copy", "decoder", "encoder", "jpeg", "ofa")),
    )
    values = dict(zip(suffixes, engines, strict=True))
    return {
        f"{resource}.product": product,
        f"{resource}.count": str(count),
        f"{resource}.replicas": "1",
        f"{resource}.sharing-strategy": "none",
        f"{resource}.memory": str(memory),
        **{f"{resource}.{suffix}": str(value) for suffix, value in values.items()},
    }


A100 = "NVIDIA-A100-SXM4-40GB"
DGX_A100_MACHINE = "DGXA100-920-23687-2530-000"

PLAIN: dict[str, Labels] = {
    "dgx-a100": {
        **node(DGX_A100_MACHINE, mig_capable=True),
        **full_gpu(A100, 8, 40960, "ampere", (8, 0)),
    },
    "dgx-h100": {
        **node("DGXH100", mig_capable=True),
        **full_gpu("NVIDIA-H100-80GB-HBM3", 8, 81559, "hopper", (9, 0)),
    },
    "t4x4": {
        # t4x4 has no machine type of its own; the test names a DMI file.
        **node("PowerEdge-R740", mig_capable=False),
        **full_gpu("Tesla-T4", 4, 15360, "turing", (7, 5)),
    },
    "vgpu": {
        **node("Standard-PC-Q35-ICH9-2009", mig_capable=False, mode="graphics"),
        **full_gpu("GRID-T4-16Q", 2, 16384, "turing", (7, 5)),
        "nvidia.com/vgpu.present": "true",
        "nvidia.com/vgpu.host-driver-version": "550.54.16",
        "nvidia.com/vgpu.host-driver-branch": "r550_40",
    },
    "a100-mig-single": {
        **node(DGX_A100_MACHINE, mig_capable=True),
        # The full-GPU pass (replicas 0) is overwritten by the MIG set, except
        # for the architecture keys, which the MIG set does not have.
        **full_gpu(A100, 8, 40960, "ampere", (8, 0), replicas=0),
        "nvidia.com/mig.strategy": "single",
        **mig("nvidia.com/gpu", f"{A100}-MIG-1g.5gb", 56, 4864, (14, 1, 1, 1, 0, 0, 0, 0)),
    },
    "a100-mig-mixed": {
        **node(DGX_A100_MACHINE, mig_capable=True),
        # GPUs 5 and 6 have MIG off: the model's set is the sharing-aware one.
        **full_gpu(A100, 8, 40960, "ampere", (8, 0)),
        "nvidia.com/mig.strategy": "mixed",
        **mig("nvidia.com/mig-1g.5gb", f"{A100}-MIG-1g.5gb", 8, 4864, (14, 1, 1, 1, 0, 0, 0, 0)),
        **mig(
            "nvidia.com/mig-1g.5gb.me", f"{A100}-MIG-1g.5gb.me", 1, 4864, (14, 1, 1, 1, 1, 0, 1, 1)
        ),
        **mig("nvidia.com/mig-1g.10gb", f"{A100}-MIG-1g.10gb", 1, 9984, (14, 1, 1, 1, 1, 0, 0, 0)),
        **mig("nvidia.com/mig-2g.10gb", f"{A100}-MIG-2g.10gb", 6, 9984, (28, 2, 2, 2, 1, 0, 0, 0)),
        **mig("nvidia.com/mig-3g.20gb", f"{A100}-MIG-3g.20gb", 2, 19968, (42, 3, 3, 3, 2, 0, 0, 0)),
        **mig("nvidia.com/mig-4g.20gb", f"{A100}-MIG-4g.20gb", 1, 19968, (56, 4, 4, 4, 2, 0, 0, 0)),
        **mig("nvidia.com/mig-7g.40gb", f"{A100}-MIG-7g.40gb", 1, 40192, (98, 7, 7, 7, 5, 0, 1, 1)),
    },
}

MIG_STRATEGY = {"a100-mig-single": "single", "a100-mig-mixed": "mixed"}

SHARING_FILE = """\
version: v1
sharing:
  {section}:
    renameByDefault: {rename}
    resources:
    - name: nvidia.com/gpu
      replicas: 4
    - name: nvidia.com/mig-1g.5gb
      replicas: 2
"""
MODES = {
    "none": None,
    "time-slicing": SHARING_FILE.format(section="timeSlicing", rename="false"),
    "time-slicing-renamed": SHARING_FILE.format(section="timeSlicing", rename="true"),
    "mps": SHARING_FILE.format(section="mps", rename="false"),
}


def _share(labels: Labels, resource: str, replicas: int, strategy: str, suffix: bool) -> None:
    if f"{resource}.product" not in labels:
        return
    labels[f"{resource}.replicas"] = str(replicas)
    labels[f"{resource}.sharing-strategy"] = strategy
    if suffix:
        labels[f"{resource}.product"] += "-SHARED"


def _time_sliced(suffix: bool) -> Callable[[Labels], Labels]:
    def change(labels: Labels) -> Labels:
        _share(labels, "nvidia.com/gpu", 4, "time-slicing", suffix)
        _share(labels, "nvidia.com/mig-1g.5gb", 2, "time-slicing", suffix)
        return labels

    return change


def _mps(labels: Labels) -> Labels:
    labels["nvidia.com/mps.capable"] = "true"
    _share(labels, "nvidia.com/gpu", 4, "mps", True)
    return labels


CHANGES: dict[str, Callable[[Labels], Labels]] = {
    "none": lambda labels: labels,
    "time-slicing": _time_sliced(True),
    "time-slicing-renamed": _time_sliced(False),
    "mps": _mps,
}

# MPS cannot share a GPU that has MIG enabled: the labelling pass fails (an
# error record), and the config loader refuses mixed+MPS outright (one line on
# stderr).
PASS_FAILURES = {
    ("a100-mig-single", "mps"): (
        "gpu-feature-discovery: MPS sharing is not supported for MIG devices "
        "(MIG is enabled on GPUs [0, 1, 2, 3, 4, 5, 6, 7])"
    ),
}
CONFIG_FAILURES = {
    ("a100-mig-mixed", "mps"): re.compile(
        r"^gpu-feature-discovery: \S+/mps\.yaml: sharing\.mps: "
        r"using --mig-strategy=mixed is not supported with MPS\n$"
    ),
}

CASES = [pytest.param(profile, mode, id=f"{profile}-{mode}") for profile in PLAIN for mode in MODES]


@pytest.mark.parametrize(("profile", "mode"), CASES)
def test_golden_label_set(
    profile: str,
    mode: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    logs: list[tuple[str, str]],
) -> None:
    args = ["--mock-nvml", profile, "--mig-strategy", MIG_STRATEGY.get(profile, "none")]
    if profile == "t4x4":
        dmi = tmp_path / "product_name"
        dmi.write_text("PowerEdge R740\n")
        args += ["--machine-type-file", str(dmi)]
    config = MODES[mode]
    if config is not None:
        path = tmp_path / f"{mode}.yaml"
        path.write_text(config)
        args += ["--config-file", str(path)]

    code, labels = run_oneshot(tmp_path, *args)

    if (profile, mode) in PASS_FAILURES:
        assert (code, labels) == (1, None)
        assert ("ERROR", PASS_FAILURES[profile, mode]) in logs
        return
    if (profile, mode) in CONFIG_FAILURES:
        assert (code, labels) == (1, None)
        assert CONFIG_FAILURES[profile, mode].fullmatch(capsys.readouterr().err)
        return
    assert code == 0
    assert labels == CHANGES[mode](dict(PLAIN[profile]))


RTX = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


def test_golden_labels_of_mig_profiles_with_suffixes(tmp_path: Path) -> None:
    # rtx-pro-6000-mig, mixed: each suffixed profile is a resource of its own, `+` spelt `.`.
    dmi = tmp_path / "product_name"
    dmi.write_text("PowerEdge XE7745\n")
    args = ["--mock-nvml", "rtx-pro-6000-mig", "--mig-strategy", "mixed"]
    code, labels = run_oneshot(tmp_path, *args, "--machine-type-file", str(dmi))
    assert code == 0
    driver = {"major": "580", "minor": "65", "revision": "06", "full": "580.65.06"}
    expected = {
        **node("PowerEdge-XE7745", mig_capable=True),
        **{f"nvidia.com/cuda.driver-version.{k}": v for k, v in driver.items()},
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "65",
        "nvidia.com/cuda.driver.rev": "06",
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        # Every GPU has MIG on: the full-GPU set counts them with no replicas.
        **full_gpu(RTX, 4, 97887, "blackwell", (12, 0), replicas=0),
        "nvidia.com/mig.strategy": "mixed",
        **mig("nvidia.com/mig-1g.24gb.gfx", f"{RTX}-MIG-1g.24gb.gfx", 5, 24192,
              (46, 1, 1, 1, 1, 1, 1, 0)),
        **mig("nvidia.com/mig-1g.24gb.me", f"{RTX}-MIG-1g.24gb.me", 1, 24192,
              (46, 1, 1, 1, 1, 1, 1, 1)),
        **mig("nvidia.com/mig-1g.24gb.me.all", f"{RTX}-MIG-1g.24gb.me.all", 1, 24192,
              (46, 1, 1, 1, 4, 4, 4, 1)),
        **mig("nvidia.com/mig-1g.24gb-me", f"{RTX}-MIG-1g.24gb-me", 1, 24192,
              (46, 1, 1, 1, 0, 0, 0, 0)),
        **mig("nvidia.com/mig-2g.48gb", f"{RTX}-MIG-2g.48gb", 1, 48512,
              (94, 2, 2, 2, 2, 2, 2, 0)),
        **mig("nvidia.com/mig-2g.48gb-me", f"{RTX}-MIG-2g.48gb-me", 1, 48512,
              (94, 2, 2, 2, 0, 0, 0, 0)),
        **mig("nvidia.com/mig-4g.96gb.gfx", f"{RTX}-MIG-4g.96gb.gfx", 1, 97280,
              (188, 4, 4, 4, 4, 4, 4, 1)),
    }  # fmt: skip
    assert labels == expected
