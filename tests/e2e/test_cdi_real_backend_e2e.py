"""CDI end to end on the real NVML backend, for each driver-root layout.

The plugin process runs without `--mock-nvml`: it loads the compiled fake
`libnvidia-ml.so.1` from a fake driver install (real ELF libraries, an
`ld.so.cache` from `ldconfig -r`, binaries, firmware, a socket, config files,
device nodes) and reads the node through the NVML C API, driver version
included, so the libraries it lists are found through the version NVML
reported. With `--device-list-strategy cdi-cri` it writes the GPU spec; the
test checks that file against `../shared/spec/cdi.md` (exact lists, derived
from what the fake install holds and from the spec's own text, not from the
code's rules), then allocates through the kubelet simulator and injects the
returned names into an empty OCI spec with our own injector, as containerd
would.

Layouts: the host's driver (`/` mounted at the container path) and a driver
container (`/run/nvidia/driver`, with its own `dev/`) on a DGX A100; a split
dev root (driver container files, the host's `/dev`) on the same machine
with a mixed MIG layout (`--mig-strategy mixed`), where a MIG device and a
whole GPU are injected: one plugin start per layout. The plugin reads
sysfs, the MIG capability table and, in the split layout, `/dev` from fixed
host paths, so it runs in a private mount namespace that shows it the fake ones
(`tests/unit/cdi/namespace.py`); without root these tests skip. One GPU's `drm/`
directory is removed from the fake sysfs, so the spec must give that GPU no
DRM nodes even though `/dev/dri` has nodes for it.
"""

from __future__ import annotations

import filecmp
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devices.model import Gpu, Inventory
from kubelet.api import api_pb2
from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess
from tests.unit.cdi.fakeroot import (
    CAPS_MAJOR,
    CONTROL_NODES,
    LIBDIR,
    PERSISTENCED_SOCKET,
    STALE_VERSION,
    VERSION,
    FakeDriverRoot,
    build_driver_root,
    compile_driver_libraries,
    drm_names,
    sysfs_bus_id,
)
from tests.unit.cdi.injector import empty_oci_spec, inject
from tests.unit.cdi.namespace import make_private_dev, namespace_problem, wrapper
from tests.unit.cdi.validate import cdi_problems
from tests.unit.devices.fake_nvml_driver import FakeDriver, fake_nvml_library, install_driver

__all__ = ["fake_nvml_library"]  # the session fixture that compiles the fake NVML
SPEC_FILE = "k8s.device-plugin.nvidia.com-gpu.json"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]


@dataclass(frozen=True)
class Layout:
    name: str
    driver_root: str  # --nvidia-driver-root
    dev_root: str | None  # --dev-root, when the driver root has no dev/
    hook_path: str  # --nvidia-cdi-hook-path

    @property
    def dev_prefix(self) -> str:
        """Where the spec's device nodes live on the host."""
        return self.dev_root if self.dev_root is not None else self.driver_root

    def hook_args(self, name: str, *args: str) -> list[str]:
        program = os.path.basename(self.hook_path)
        head = [program, "hook", name] if program == "nvidia-ctk" else [program, name]
        return [*head, *args]


HOST = Layout("host", "/", None, "/usr/bin/nvidia-ctk")
DRIVER_CONTAINER = Layout(
    "driver-container", "/run/nvidia/driver", None, "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
)
SPLIT = Layout("split-dev-root", "/run/nvidia/driver", "/", "/usr/local/nvidia/toolkit/nvidia-ctk")


def host_join(root: str, path: str) -> str:
    return root.rstrip("/") + path


@dataclass
class Node:
    """One fake node: what NVML serves, the driver install and the host's /dev."""

    layout: Layout
    nvml: FakeDriver
    nvml_library: Path  # the compiled fake libnvidia-ml.so.1
    install: FakeDriverRoot
    dev_base: Path  # holds dev/ with the nodes the host has
    no_drm: Gpu  # the GPU whose sysfs drm/ directory was removed

    @property
    def inventory(self) -> Inventory:
        return self.nvml.inventory

    def local(self, host_path: str) -> Path:
        """Where the fake host keeps host path `host_path` (the longest matching root wins)."""
        roots = [
            (self.layout.driver_root, self.install.root),
            (self.layout.dev_prefix, self.dev_base),
        ]
        for prefix, local in sorted(roots, key=lambda root: len(root[0]), reverse=True):
            relative = os.path.relpath(host_path, prefix)
            if not relative.startswith(".."):
                return local / relative
        raise AssertionError(f"{host_path} is under no root of the {self.layout.name} layout")

    def cap_minors(self) -> dict[str, int]:
        """The driver's MIG capability table, as the fake /proc file states it."""
        pairs = (line.split() for line in self.nvml.mig_minors.read_text().splitlines())
        return {name: int(minor) for name, minor in pairs}


@pytest.fixture(scope="session")
def install_libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_driver_libraries(tmp_path_factory.mktemp("driver-libraries"))


def make_node(
    base: Path, libraries: Path, nvml_library: Path, profile: str, layout: Layout
) -> Node:
    problem = namespace_problem()
    if problem is not None:
        pytest.skip(problem)
    # One directory: NVML's host files and the install's DRM entries share base/sys.
    nvml = install_driver(nvml_library, base, profile)
    own_dev = layout.dev_root is None
    install = build_driver_root(
        base,
        libraries,
        nvml.inventory.gpus,
        dev=own_dev,
        replace={"libnvidia-ml.so.1": nvml_library},
    )
    assert install.sysfs == nvml.sysfs
    dev_base = install.root
    if not own_dev:
        dev_base = base / "host"
        make_private_dev(dev_base, nvml.inventory.gpus)
    no_drm = nvml.inventory.gpus[-1]
    drm = install.sysfs / "bus/pci/devices" / sysfs_bus_id(no_drm.pci_bus_id) / "drm"
    for entry in drm.iterdir():
        entry.rmdir()
    drm.rmdir()
    return Node(layout, nvml, nvml_library, install, dev_base, no_drm)


def plugin(sim: KubeletSimulator, node: Node, spec_dir: Path, *extra: str) -> PluginProcess:
    layout = node.layout
    args = [
        "--kubelet-socket", str(sim.directory / "kubelet.sock"),
        "--device-list-strategy", "cdi-cri",
        "--driver-root-ctr-path", str(node.install.root),
        "--nvidia-driver-root", layout.driver_root,
        "--nvidia-cdi-hook-path", layout.hook_path,
        "--cdi-spec-dir", str(spec_dir),
        *(["--dev-root", layout.dev_root] if layout.dev_root is not None else []),
        *extra,
    ]  # fmt: skip
    dev = None if layout.dev_root is None else node.dev_base / "dev"
    ns = wrapper(node.nvml.sysfs, node.nvml.mig_minors, dev)
    return PluginProcess(args, env=node.nvml.env, wrapper=ns)


# ---- the written spec against shared/spec/cdi.md


def check_common_edits(spec: dict[str, Any], node: Node) -> None:
    layout, install = node.layout, node.install
    common = spec["containerEdits"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert sorted(n["path"] for n in common["deviceNodes"]) == sorted(CONTROL_NODES)
    for device_node in common["deviceNodes"]:
        assert device_node["hostPath"] == host_join(layout.dev_prefix, device_node["path"])
    mounts = common["mounts"]
    # Exactly what the install holds, in the spec's order: 48, as on the observed node.
    assert [m["containerPath"] for m in mounts] == install.mounts
    assert len(mounts) == 48
    for mount in mounts:
        path = mount["containerPath"]
        assert mount["hostPath"] == host_join(layout.driver_root, path)
        noexec = ["noexec"] if path == PERSISTENCED_SOCKET else []
        assert mount["options"] == MOUNT_OPTIONS + noexec, path
        assert STALE_VERSION not in path  # an older driver's firmware and library
        assert "libfoo" not in path  # in the cache, not the driver's
    assert [h["hookName"] for h in common["hooks"]] == ["createContainer"] * 3
    assert {h["path"] for h in common["hooks"]} == {layout.hook_path}
    v = VERSION
    assert [h["args"] for h in common["hooks"]] == [
        layout.hook_args(
            "create-symlinks",
            "--link", f"libcuda.so.1::{LIBDIR}/libcuda.so",
            "--link", f"libGLX_nvidia.so.{v}::{LIBDIR}/libGLX_indirect.so.0",
            "--link", f"libnvidia-opticalflow.so.1::{LIBDIR}/libnvidia-opticalflow.so",
        ),
        layout.hook_args(
            "create-symlinks",
            "--link", f"../libnvidia-allocator.so.1::{LIBDIR}/gbm/nvidia-drm_gbm.so",
            "--link", f"libglxserver_nvidia.so.{v}::"
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
        ),
        layout.hook_args("update-ldcache", "--folder", LIBDIR, "--folder", f"{LIBDIR}/vdpau"),
    ]  # fmt: skip


def device_nodes(node: Node, *paths: str) -> list[dict[str, str]]:
    return [{"path": p, "hostPath": host_join(node.layout.dev_prefix, p)} for p in paths]


def expected_gpu_edits(gpu: Gpu, node: Node) -> dict[str, Any]:
    layout = node.layout
    if gpu.uuid == node.no_drm.uuid:
        return {"deviceNodes": device_nodes(node, gpu.device_path)}
    card, render = drm_names(gpu)
    bus = sysfs_bus_id(gpu.pci_bus_id)
    drm = (f"/dev/dri/{card}", f"/dev/dri/{render}")
    return {
        "deviceNodes": device_nodes(node, gpu.device_path, *drm),
        "hooks": [
            {
                "hookName": "createContainer",
                "path": layout.hook_path,
                "args": layout.hook_args(
                    "create-symlinks",
                    "--link", f"../{card}::/dev/dri/by-path/pci-{bus}-card",
                    "--link", f"../{render}::/dev/dri/by-path/pci-{bus}-render",
                ),
            },
            {
                "hookName": "createContainer",
                "path": layout.hook_path,
                "args": layout.hook_args("chmod", "--mode", "755", "--path", "/dev/dri"),
            },
        ],
    }  # fmt: skip


def expected_devices(node: Node) -> dict[str, dict[str, Any]]:
    """Device name -> its edits: every GPU (MIG-enabled parents too) and MIG device."""
    caps = node.cap_minors()
    found = {}
    for gpu in node.inventory.gpus:
        found[gpu.uuid] = expected_gpu_edits(gpu, node)
        for mig in gpu.mig_devices:
            gi = caps[f"gpu{gpu.minor}/gi{mig.gi}/access"]
            ci = caps[f"gpu{gpu.minor}/gi{mig.gi}/ci{mig.ci}/access"]
            found[mig.uuid] = {
                "deviceNodes": device_nodes(
                    node,
                    gpu.device_path,
                    f"/dev/nvidia-caps/nvidia-cap{gi}",
                    f"/dev/nvidia-caps/nvidia-cap{ci}",
                )
            }
    return found


def check_spec(spec_dir: Path, node: Node) -> dict[str, Any]:
    written = spec_dir / SPEC_FILE
    assert stat.S_IMODE(written.stat().st_mode) == 0o644
    assert sorted(p.name for p in spec_dir.iterdir()) == [SPEC_FILE]
    spec: dict[str, Any] = json.loads(written.read_text())
    assert cdi_problems(spec) == []
    assert spec["cdiVersion"] == "0.5.0"
    assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu"
    names = [device["name"] for device in spec["devices"]]
    assert names == sorted(names)
    assert {d["name"]: d["containerEdits"] for d in spec["devices"]} == expected_devices(node)
    check_common_edits(spec, node)
    # Nothing the spec names is missing on the host.
    edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
    for edit in edits:
        for item in (*edit.get("deviceNodes", ()), *edit.get("mounts", ())):
            assert node.local(item["hostPath"]).exists(), item
    return spec


# ---- a device from that spec injected as a runtime would


def check_injected(oci: dict[str, Any], node: Node, nodes: dict[str, tuple[int, int]]) -> None:
    """The driver's key files and exactly the control nodes plus `nodes` (path: numbers)."""
    driver_root = node.layout.driver_root
    mounts = {m["destination"]: m["source"] for m in oci["mounts"]}
    # libcuda.so.1 is a link made by ldconfig; what it resolves to must be mounted.
    linked = node.install.path(f"{LIBDIR}/libcuda.so.1")
    target = "/" + os.path.relpath(os.path.realpath(linked), node.install.root)
    assert target == f"{LIBDIR}/libcuda.so.{VERSION}"
    assert mounts[target] == host_join(driver_root, target)
    assert os.path.samefile(node.local(mounts[target]), linked)
    nvml = f"{LIBDIR}/libnvidia-ml.so.{VERSION}"
    assert mounts[nvml] == host_join(driver_root, nvml)
    # ... and it is the library the plugin itself read the node through.
    assert filecmp.cmp(node.local(mounts[nvml]), node.nvml_library, shallow=False)
    assert mounts["/usr/bin/nvidia-smi"] == host_join(driver_root, "/usr/bin/nvidia-smi")
    assert len(mounts) == 48
    devices = {d["path"]: (d["type"], d["major"], d["minor"]) for d in oci["linux"]["devices"]}
    expected = {path: ("c", *numbers) for path, numbers in CONTROL_NODES.items()}
    expected.update({path: ("c", major, minor) for path, (major, minor) in nodes.items()})
    assert devices == expected
    assert "NVIDIA_VISIBLE_DEVICES=void" in oci["process"]["env"]


def check_whole_gpu(
    response: api_pb2.AllocateResponse, gpu: Gpu, spec: dict[str, Any], spec_dir: Path, node: Node
) -> None:
    """A whole GPU's CDI name, injected, gives the driver, its nodes and its hooks."""
    container = response.container_responses[0]
    names = [device.name for device in container.cdi_devices]
    assert names == [f"k8s.device-plugin.nvidia.com/gpu={gpu.uuid}"]
    # With CDI only, the response carries nothing but the names.
    assert not container.envs
    assert not container.mounts
    assert not container.devices
    oci = inject(empty_oci_spec(), names, [spec_dir], host=node.local)
    card, render = drm_names(gpu)
    check_injected(
        oci,
        node,
        {
            gpu.device_path: (195, gpu.minor),
            f"/dev/dri/{card}": (226, gpu.minor + 1),
            f"/dev/dri/{render}": (226, 128 + gpu.minor),
        },
    )
    # The driver's three hooks, then the GPU's by-path links and chmod of /dev/dri.
    spec_hooks = [*spec["containerEdits"]["hooks"], *expected_gpu_edits(gpu, node)["hooks"]]
    assert oci["hooks"] == {
        "createContainer": [{"path": h["path"], "args": h["args"]} for h in spec_hooks]
    }


# The split layout runs in the MIG test below: one plugin start per layout.
@pytest.mark.parametrize("layout", [HOST, DRIVER_CONTAINER], ids=lambda layout: layout.name)
async def test_real_backend_cdi_spec_and_injection(
    sim: KubeletSimulator,
    tmp_path: Path,
    install_libraries: Path,
    fake_nvml_library: Path,
    layout: Layout,
) -> None:
    node = make_node(tmp_path / "node", install_libraries, fake_nvml_library, "dgx-a100", layout)
    spec_dir = tmp_path / "cdi"
    gpus = node.inventory.gpus
    async with plugin(sim, node, spec_dir) as process:
        await sim.wait_devices("nvidia.com/gpu", lambda d: len(d) == len(gpus), timeout=20)
        await process.wait_state(lambda s: s["state"] == "serving")
        response = await sim.allocate("nvidia.com/gpu", [[gpus[3].uuid]])
    spec = check_spec(spec_dir, node)
    check_whole_gpu(response, gpus[3], spec, spec_dir, node)


async def test_real_backend_split_dev_root_with_mig_devices_and_whole_gpus(
    sim: KubeletSimulator, tmp_path: Path, install_libraries: Path, fake_nvml_library: Path
) -> None:
    # Split layout: the GPU, DRM and capability nodes come from the host's /dev.
    node = make_node(
        tmp_path / "node", install_libraries, fake_nvml_library, "a100-mig-mixed", SPLIT
    )
    spec_dir = tmp_path / "cdi"
    parent = node.inventory.gpus[1]  # three 2g.10gb instances
    mig = parent.mig_devices[2]
    whole = node.inventory.gpus[5]  # MIG off: a nvidia.com/gpu
    assert not whole.mig_enabled
    async with plugin(sim, node, spec_dir, "--mig-strategy", "mixed") as process:
        await sim.wait_devices("nvidia.com/mig-2g.10gb", lambda d: len(d) == 6, timeout=20)
        await sim.wait_devices("nvidia.com/gpu", lambda d: len(d) == 2, timeout=20)
        await process.wait_state(lambda s: s["state"] == "serving")
        response = await sim.allocate("nvidia.com/mig-2g.10gb", [[mig.uuid]])
        whole_response = await sim.allocate("nvidia.com/gpu", [[whole.uuid]])
    spec = check_spec(spec_dir, node)
    check_whole_gpu(whole_response, whole, spec, spec_dir, node)
    # The MIG-enabled parents are devices of their own beside their MIG devices.
    names = {device["name"] for device in spec["devices"]}
    assert {gpu.uuid for gpu in node.inventory.gpus if gpu.mig_enabled} <= names
    assert sum(name.startswith("MIG-") for name in names) == 20  # as the profile's header says
    names_given = [device.name for device in response.container_responses[0].cdi_devices]
    assert names_given == [f"k8s.device-plugin.nvidia.com/gpu={mig.uuid}"]
    oci = inject(empty_oci_spec(), names_given, [spec_dir], host=node.local)
    caps = node.cap_minors()
    gi = caps[f"gpu{parent.minor}/gi{mig.gi}/access"]
    ci = caps[f"gpu{parent.minor}/gi{mig.gi}/ci{mig.ci}/access"]
    check_injected(
        oci,
        node,
        {
            parent.device_path: (195, parent.minor),
            f"/dev/nvidia-caps/nvidia-cap{gi}": (CAPS_MAJOR, gi),
            f"/dev/nvidia-caps/nvidia-cap{ci}": (CAPS_MAJOR, ci),
        },
    )
    # A MIG device brings no DRM nodes and no hooks of its own.
    assert oci["hooks"] == {
        "createContainer": [
            {"path": h["path"], "args": h["args"]} for h in spec["containerEdits"]["hooks"]
        ]
    }
