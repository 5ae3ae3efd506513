"""The GPU spec the plugin writes, on a fake install, for the three driver-root layouts.

Through `resources.cdi_spec.cdi_specs`, the entry point the reconciler calls,
with `ResourceOptions` as the flags make them: host driver (`/` mounted at the
container path), driver container (`/run/nvidia/driver`, with its own `dev/`)
and split dev root (driver container files, the host's `/dev`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devices.model import Inventory
from devices.pci import sysfs_bus_id
from resources.cdi_spec import cdi_specs
from resources.options import DeviceListStrategy, MigStrategy, ResourceOptions

from .conftest import profile_inventory
from .fakeroot import FakeDriverRoot, build_driver_root, make_dev_nodes
from .validate import cdi_problems

CDI = (DeviceListStrategy.CDI_CRI,)


def options_for(fake: FakeDriverRoot, **kwargs: Any) -> ResourceOptions:
    return ResourceOptions(
        device_list_strategy=CDI,
        driver_root_ctr_path=str(fake.root),
        sysfs_root=str(fake.sysfs),
        **kwargs,
    )


def check_gpu_spec(
    spec: dict[str, Any], fake: FakeDriverRoot, inventory: Inventory, driver: str, dev: str
) -> None:
    assert cdi_problems(spec) == []
    assert spec["cdiVersion"] == "0.5.0"
    names = [device["name"] for device in spec["devices"]]
    assert names == sorted(gpu.uuid for gpu in inventory.gpus)
    common = spec["containerEdits"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert [m["containerPath"] for m in common["mounts"]] == fake.mounts
    assert [m["hostPath"] for m in common["mounts"]] == [
        driver.rstrip("/") + path for path in fake.mounts
    ]
    assert all(node["hostPath"] == dev.rstrip("/") + node["path"] for node in common["deviceNodes"])
    assert len(common["deviceNodes"]) == 4
    assert [hook["args"][2] for hook in common["hooks"]] == [
        "create-symlinks",
        "create-symlinks",
        "update-ldcache",
    ]
    by_uuid = {gpu.uuid: gpu for gpu in inventory.gpus}
    for device in spec["devices"]:
        gpu = by_uuid[device["name"]]
        nodes = device["containerEdits"]["deviceNodes"]
        assert nodes[0] == {
            "path": f"/dev/nvidia{gpu.minor}",
            "hostPath": f"{dev.rstrip('/')}/dev/nvidia{gpu.minor}",
        }
        assert [n["path"] for n in nodes[1:]] == list(fake.drm.get(gpu.minor, ()))


@pytest.mark.parametrize("driver", ["/", "/run/nvidia/driver"], ids=["host", "driver-container"])
def test_driver_root_with_its_own_dev(
    fake_root: FakeDriverRoot, dgx: Inventory, driver: str
) -> None:
    (spec,) = cdi_specs(dgx, options_for(fake_root, driver_root=driver, dev_root="/elsewhere"))
    # A driver root that carries /dev is also the dev root, whatever --dev-root says.
    check_gpu_spec(spec, fake_root, dgx, driver, driver)


def test_split_dev_root(tmp_path: Path, driver_libraries: Path, dgx: Inventory) -> None:
    fake = build_driver_root(tmp_path / "node", driver_libraries, dgx.gpus, dev=False, drm=False)
    host = tmp_path / "host-dev"
    make_dev_nodes(host, dgx.gpus, drm=False)
    options = options_for(
        fake,
        driver_root="/run/nvidia/driver",
        dev_root="/",
        # The container's own /dev is the host's here; the probe reads the fake one.
        host_dev_exists=lambda path: (host / path.lstrip("/")).exists(),
    )
    (spec,) = cdi_specs(dgx, options)
    check_gpu_spec(spec, fake, dgx, "/run/nvidia/driver", "/")


def test_mig_devices_and_their_parents(tmp_path: Path, driver_libraries: Path) -> None:
    mixed = profile_inventory("a100-mig-mixed")
    fake = build_driver_root(tmp_path, driver_libraries, mixed.gpus)
    options = options_for(fake, driver_root="/run/nvidia/driver", mig_strategy=MigStrategy.MIXED)
    (spec,) = cdi_specs(mixed, options)
    assert cdi_problems(spec) == []
    devices = {device["name"]: device["containerEdits"] for device in spec["devices"]}
    migs = [mig for gpu in mixed.gpus for mig in gpu.mig_devices]
    assert migs
    assert set(devices) == {gpu.uuid for gpu in mixed.gpus} | {mig.uuid for mig in migs}
    for gpu in mixed.gpus:
        for mig in gpu.mig_devices:
            assert devices[mig.uuid] == {
                "deviceNodes": [
                    {"path": path, "hostPath": "/run/nvidia/driver" + path}
                    for path in (
                        f"/dev/nvidia{gpu.minor}",
                        f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
                        f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
                    )
                ]
            }
        # A MIG-enabled parent is listed whole, with its DRM nodes and hooks.
        assert len(devices[gpu.uuid]["hooks"]) == 2


def test_graphics_mig_devices_also_get_their_parents_drm_nodes_and_links(
    tmp_path: Path, driver_libraries: Path
) -> None:
    blackwell = profile_inventory("rtx-pro-6000-mig")
    fake = build_driver_root(tmp_path, driver_libraries, blackwell.gpus)
    options = options_for(fake, driver_root="/run/nvidia/driver", mig_strategy=MigStrategy.MIXED)
    (spec,) = cdi_specs(blackwell, options)
    assert cdi_problems(spec) == []
    devices = {device["name"]: device["containerEdits"] for device in spec["devices"]}
    graphics = set()
    for gpu in blackwell.gpus:
        bus = sysfs_bus_id(gpu.pci_bus_id)
        card, render = fake.drm[gpu.minor]
        for mig in gpu.mig_devices:
            edits = devices[mig.uuid]
            paths = [node["path"] for node in edits["deviceNodes"]]
            own = [
                f"/dev/nvidia{gpu.minor}",
                f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
                f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
            ]
            if not mig.profile.endswith("+gfx"):
                assert paths == own, mig.profile
                assert "hooks" not in edits
                continue
            graphics.add(mig.profile)
            assert paths == [*own, card, render]
            assert all(n["hostPath"] == "/run/nvidia/driver" + n["path"]
                       for n in edits["deviceNodes"])  # fmt: skip
            links, chmod = (hook["args"][2:] for hook in edits["hooks"])
            assert links == [
                "create-symlinks",
                "--link", f"../{card.split('/')[-1]}::/dev/dri/by-path/pci-{bus}-card",
                "--link", f"../{render.split('/')[-1]}::/dev/dri/by-path/pci-{bus}-render",
            ]  # fmt: skip
            assert chmod == ["chmod", "--mode", "755", "--path", "/dev/dri"]
    assert graphics == {"1g.24gb+gfx", "4g.96gb+gfx"}


def test_a_graphics_mig_device_without_drm_nodes_gets_its_capability_nodes_only(
    tmp_path: Path, driver_libraries: Path
) -> None:
    # nvidia-drm not loaded: the kernel lists no DRM minors, and /dev has none.
    blackwell = profile_inventory("rtx-pro-6000-mig")
    fake = build_driver_root(tmp_path, driver_libraries, blackwell.gpus, drm=False)
    options = options_for(fake, driver_root="/run/nvidia/driver", mig_strategy=MigStrategy.MIXED)
    (spec,) = cdi_specs(blackwell, options)
    gpu = blackwell.gpus[3]
    (mig,) = gpu.mig_devices
    (edits,) = [d["containerEdits"] for d in spec["devices"] if d["name"] == mig.uuid]
    assert edits == {
        "deviceNodes": [
            {"path": path, "hostPath": "/run/nvidia/driver" + path}
            for path in (
                f"/dev/nvidia{gpu.minor}",
                f"/dev/nvidia-caps/nvidia-cap{mig.gi_cap_minor}",
                f"/dev/nvidia-caps/nvidia-cap{mig.ci_cap_minor}",
            )
        ]
    }


def test_gds_and_mofed_specs(fake_root: FakeDriverRoot, dgx: Inventory) -> None:
    for name in ("nvidia-fs0", "nvidia-fs1", "infiniband/uverbs0", "infiniband/rdma_cm"):
        path = fake_root.path(f"/dev/{name}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    fake_root.path("/etc/cufile.json").write_text("{}")
    options = options_for(
        fake_root, driver_root="/run/nvidia/driver", gds_enabled=True, mofed_enabled=True
    )
    _, gds, mofed = cdi_specs(dgx, options)
    for spec in (gds, mofed):
        assert cdi_problems(spec) == []
        assert spec["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert gds["kind"] == "k8s.device-plugin.nvidia.com/gds"
    assert gds["devices"] == [
        {
            "name": "all",
            "containerEdits": {
                "deviceNodes": [
                    {"path": p, "hostPath": "/run/nvidia/driver" + p}
                    for p in ("/dev/nvidia-fs0", "/dev/nvidia-fs1")
                ],
                # /run/udev does not exist on this node: not mounted
                "mounts": [
                    {
                        "hostPath": "/run/nvidia/driver/etc/cufile.json",
                        "containerPath": "/etc/cufile.json",
                        "options": ["ro", "nosuid", "nodev", "bind"],
                    }
                ],
            },
        }
    ]
    assert [n["path"] for n in mofed["devices"][0]["containerEdits"]["deviceNodes"]] == [
        "/dev/infiniband/uverbs0",
        "/dev/infiniband/rdma_cm",
    ]


def test_regular_files_stand_in_for_nodes_without_mknod(
    tmp_path: Path, driver_libraries: Path, dgx: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_nodes = build_driver_root(tmp_path / "root-nodes", driver_libraries, dgx.gpus)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with_files = build_driver_root(tmp_path / "files", driver_libraries, dgx.gpus)
    monkeypatch.undo()
    assert with_files.path("/dev/nvidiactl").is_file()

    def gpu_spec(fake: FakeDriverRoot) -> dict[str, Any]:
        (spec,) = cdi_specs(dgx, options_for(fake, driver_root="/run/nvidia/driver"))
        return spec

    # A test machine without mknod describes the same node.
    assert gpu_spec(with_files) == gpu_spec(with_nodes)
