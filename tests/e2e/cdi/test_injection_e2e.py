"""End to end: a device allocated through `cdi-cri` gives a container the driver.

The real plugin process (simulated NVML, dgx-a100 profile) runs on a fake
driver install with `--device-list-strategy cdi-cri`; the kubelet simulator
allocates one GPU; the returned CDI name is resolved against the spec
directory and injected into an empty OCI runtime spec by our own injector,
as containerd or CRI-O would. The container must then see the file
`libcuda.so.1` resolves to, `libnvidia-ml`, `nvidia-smi`, its own GPU's
device node and the control nodes; every host path must exist on the (fake)
host.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from devices.model import Inventory
from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.cdi.fakeroot import LIBDIR, VERSION, FakeDriverRoot
from tests.unit.cdi.injector import InjectionError, empty_oci_spec, inject
from tests.unit.cdi.validate import cdi_problems


def on_host(fake: FakeDriverRoot, driver_root: str) -> Any:
    """Host path -> where the fake host keeps it (the driver root is the fake tree)."""

    def local(host_path: str) -> Path:
        relative = os.path.relpath(host_path, driver_root)
        assert not relative.startswith(".."), f"{host_path} is outside the driver root"
        return fake.root / relative

    return local


@pytest.mark.parametrize(
    "driver_root", ["/", "/run/nvidia/driver"], ids=["host", "driver-container"]
)
async def test_an_allocated_cdi_device_brings_the_driver(
    sim: KubeletSimulator,
    tmp_path: Path,
    fake_root: FakeDriverRoot,
    dgx: Inventory,
    driver_root: str,
) -> None:
    spec_dir = tmp_path / "cdi"
    args = plugin_args(
        sim.directory,
        "dgx-a100",
        "--device-list-strategy",
        "cdi-cri",
        "--driver-root-ctr-path",
        str(fake_root.root),
        "--nvidia-driver-root",
        driver_root,
        "--cdi-spec-dir",
        str(spec_dir),
    )
    async with PluginProcess(args):
        view = await sim.wait_devices("nvidia.com/gpu", lambda d: len(d) == 8, timeout=20)
        chosen = view.devices[3].id
        response = await sim.allocate("nvidia.com/gpu", [[chosen]])
    container = response.container_responses[0]
    names = [device.name for device in container.cdi_devices]
    assert names == [f"k8s.device-plugin.nvidia.com/gpu={chosen}"]
    assert not container.envs
    assert not container.mounts
    assert not container.devices

    written = spec_dir / "k8s.device-plugin.nvidia.com-gpu.json"
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    spec = json.loads(written.read_text())
    assert cdi_problems(spec) == []
    assert spec["cdiVersion"] == "0.5.0"
    assert [d["name"] for d in spec["devices"]] == sorted(g.uuid for g in dgx.gpus)

    oci = inject(empty_oci_spec(), names, [spec_dir], host=on_host(fake_root, driver_root))

    prefix = driver_root.rstrip("/")
    mounts = {mount["destination"]: mount["source"] for mount in oci["mounts"]}
    libcuda = "/" + os.path.relpath(
        os.path.realpath(fake_root.path(f"{LIBDIR}/libcuda.so.1")), fake_root.root
    )
    assert libcuda == f"{LIBDIR}/libcuda.so.{VERSION}"
    for path in (libcuda, f"{LIBDIR}/libnvidia-ml.so.{VERSION}", "/usr/bin/nvidia-smi"):
        assert mounts[path] == prefix + path
    assert len(mounts) == 48

    minor = next(gpu.minor for gpu in dgx.gpus if gpu.uuid == chosen)
    devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in oci["linux"]["devices"]}
    assert devices[f"/dev/nvidia{minor}"] == ("c", 195, minor)
    assert devices["/dev/nvidiactl"] == ("c", 195, 255)
    assert set(devices) == {
        f"/dev/nvidia{minor}",
        "/dev/nvidiactl",
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    }  # no other GPU; no DRM nodes (the plugin reads the real /sys)
    assert "NVIDIA_VISIBLE_DEVICES=void" in oci["process"]["env"]
    hooks = oci["hooks"]["createContainer"]
    assert [hook["args"][:3] for hook in hooks] == [
        ["nvidia-ctk", "hook", "create-symlinks"],
        ["nvidia-ctk", "hook", "create-symlinks"],
        ["nvidia-ctk", "hook", "update-ldcache"],
    ]
    assert {hook["path"] for hook in hooks} == {"/usr/bin/nvidia-ctk"}

    # The runtime refuses a name no spec defines, as it refuses to start the container.
    with pytest.raises(InjectionError, match="unresolvable"):
        inject(empty_oci_spec(), ["k8s.device-plugin.nvidia.com/gpu=GPU-nope"], [spec_dir])
