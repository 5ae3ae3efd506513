"""Driver discovery on a fake install: everything that exists, nothing that does not.

Expected mounts come from what the fake root put on disk (`FakeDriverRoot.mounts`);
expected hooks are written out from the spec (../shared/spec/cdi.md), so a
change of either the discovery or the fake shows up here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from cdi.driver import common_edits, gds_edits, gpu_edits
from cdi.edits import Edits
from cdi.hooks import HookMaker
from cdi.layout import Layout
from devices.model import Inventory

from .fakeroot import VERSION, FakeDriverRoot, make_dev_nodes, sysfs_bus_id

DRIVER = "/run/nvidia/driver"
LIB = "/usr/lib/x86_64-linux-gnu"
SOCKET = ["ro", "nosuid", "nodev", "bind", "noexec"]
PLAIN = ["ro", "nosuid", "nodev", "bind"]


def layout(fake: FakeDriverRoot, driver_root: str = DRIVER) -> Layout:
    return Layout(
        driver_root=driver_root,
        driver_root_ctr=str(fake.root),
        dev_root=driver_root,
        dev_root_ctr=str(fake.root),
        sysfs_root=str(fake.sysfs),
    )


def common(fake: FakeDriverRoot, hooks: HookMaker | None = None) -> dict[str, Any]:
    return common_edits(VERSION, layout(fake), hooks or HookMaker()).to_json()


def mount_paths(edits: dict[str, Any]) -> list[str]:
    return [m["containerPath"] for m in edits.get("mounts", [])]


def expected_hooks(program: tuple[str, ...] = ("nvidia-ctk", "hook")) -> list[dict[str, Any]]:
    def hook(*args: str) -> dict[str, Any]:
        path = "/usr/bin/nvidia-ctk" if program[0] == "nvidia-ctk" else f"/usr/bin/{program[0]}"
        return {"hookName": "createContainer", "path": path, "args": [*program, *args]}

    return [
        hook(
            "create-symlinks",
            "--link",
            f"libcuda.so.1::{LIB}/libcuda.so",
            "--link",
            f"libGLX_nvidia.so.{VERSION}::{LIB}/libGLX_indirect.so.0",
            "--link",
            f"libnvidia-opticalflow.so.1::{LIB}/libnvidia-opticalflow.so",
        ),
        hook(
            "create-symlinks",
            "--link",
            f"../libnvidia-allocator.so.1::{LIB}/gbm/nvidia-drm_gbm.so",
            "--link",
            f"libglxserver_nvidia.so.{VERSION}::"
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so",
        ),
        hook("update-ldcache", "--folder", LIB, "--folder", f"{LIB}/vdpau"),
    ]


def test_common_edits_carry_the_whole_driver(fake_root: FakeDriverRoot) -> None:
    edits = common(fake_root)
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]
    assert edits["deviceNodes"] == [
        {"path": path, "hostPath": DRIVER + path}
        for path in (
            "/dev/nvidia-modeset",
            "/dev/nvidia-uvm-tools",
            "/dev/nvidia-uvm",
            "/dev/nvidiactl",
        )
    ]
    assert len(edits["mounts"]) == 48  # as on the reference's observed node
    assert mount_paths(edits) == fake_root.mounts
    for mount in edits["mounts"]:
        assert mount["hostPath"] == DRIVER + mount["containerPath"]
        socket = mount["containerPath"] == "/run/nvidia-persistenced/socket"
        assert mount["options"] == (SOCKET if socket else PLAIN)
        assert os.path.lexists(fake_root.path(mount["containerPath"]))
    assert edits["hooks"] == expected_hooks()
    assert fake_root.library_dirs == [LIB, f"{LIB}/vdpau"]


def test_libraries_are_the_files_their_sonames_resolve_to(fake_root: FakeDriverRoot) -> None:
    mounts = mount_paths(common(fake_root))
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-egl-gbm.so.1"):
        target = os.path.realpath(fake_root.path(f"{LIB}/{soname}"))
        assert "/" + os.path.relpath(target, fake_root.root) in mounts
    # Neither another package's library nor another driver version's.
    assert not [m for m in mounts if "libfoo" in m or "535.104.05" in m]


@pytest.mark.parametrize(
    ("path", "program"),
    [
        ("/usr/bin/nvidia-cdi-hook", ("nvidia-cdi-hook",)),
        ("/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook")),
    ],
)
def test_hook_command_line_follows_the_binary_name(
    fake_root: FakeDriverRoot, path: str, program: tuple[str, ...]
) -> None:
    assert common(fake_root, HookMaker.of(path))["hooks"] == expected_hooks(program)


@pytest.mark.parametrize(
    ("disabled", "common_hooks", "gpu_hooks"),
    [
        (["all"], [], []),
        (["create-symlinks"], ["update-ldcache"], ["chmod"]),
        (
            ["update-ldcache", " chmod "],
            ["create-symlinks", "create-symlinks"],
            ["create-symlinks"],
        ),
        (
            ["enable-cuda-compat"],
            ["create-symlinks", "create-symlinks", "update-ldcache"],
            ["create-symlinks", "chmod"],
        ),
    ],
)
def test_disabled_hooks_are_left_out(
    fake_root: FakeDriverRoot,
    dgx: Inventory,
    disabled: list[str],
    common_hooks: list[str],
    gpu_hooks: list[str],
) -> None:
    hooks = HookMaker.of("/usr/bin/nvidia-ctk", disabled)
    edits = common_edits(VERSION, layout(fake_root), hooks)
    assert [hook.args[2] for hook in edits.hooks] == common_hooks
    gpu = gpu_edits(dgx.gpus[0], layout(fake_root), hooks)
    assert [hook.args[2] for hook in gpu.hooks] == gpu_hooks
    assert len(edits.mounts) == 48  # hooks only


def _garbage(path: Path) -> None:
    path.write_bytes(b"glibc-ld.so.cache1.1" + b"\xff" * 200)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to("/etc/nowhere")


def _loop(path: Path) -> None:
    path.unlink()
    path.symlink_to("ld.so.cache")


@pytest.mark.parametrize(
    "breakage",
    [Path.unlink, _garbage, _truncated, _directory, _fifo, _dangling, _loop],
    ids=["missing", "garbage", "truncated", "directory", "fifo", "dangling", "loop"],
)
def test_without_a_usable_cache_the_library_directories_are_listed(
    fake_root: FakeDriverRoot, breakage: Any
) -> None:
    breakage(fake_root.path("/etc/ld.so.cache"))
    edits = common(fake_root)
    assert mount_paths(edits) == fake_root.mounts
    assert edits["hooks"] == expected_hooks()


def test_only_files_that_exist_are_listed(fake_root: FakeDriverRoot) -> None:
    assert mount_paths(common(fake_root)) == fake_root.mounts  # memoised now
    for path in (
        f"{LIB}/libcuda.so.{VERSION}",  # leaves libcuda.so.1 dangling in the cache
        "/usr/bin/nvidia-debugdump",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/run/nvidia-persistenced/socket",
    ):
        fake_root.remove(path)
    # Not a socket, not executable: present, but not what the spec mounts.
    fake_root.path("/run/nvidia-persistenced/socket").write_text("")
    fake_root.path("/usr/bin/nvidia-debugdump").write_text("")
    edits = common(fake_root)
    assert mount_paths(edits) == fake_root.mounts
    first_links = edits["hooks"][0]["args"]
    assert f"libcuda.so.1::{LIB}/libcuda.so" not in first_links
    assert f"libnvidia-opticalflow.so.1::{LIB}/libnvidia-opticalflow.so" in first_links


def test_a_new_library_in_a_rebuilt_cache_is_noticed(fake_root: FakeDriverRoot) -> None:
    before = mount_paths(common(fake_root))
    extra = f"{LIB}/libnvidia-extra.so.{VERSION}"
    shutil.copyfile(fake_root.path(f"{LIB}/libcuda.so.{VERSION}"), fake_root.path(extra))
    assert mount_paths(common(fake_root)) == before  # not in the cache yet
    fake_root.rebuild_cache()
    assert extra in mount_paths(common(fake_root))


def test_optional_ipc_paths_are_listed_when_present(fake_root: FakeDriverRoot) -> None:
    fake_root.path("/tmp/nvidia-mps").mkdir()
    from .fakeroot import _socket

    _socket(fake_root.path("/var/run/nvidia-fabricmanager/socket"))
    mounts = common(fake_root)["mounts"]
    ipc = [m for m in mounts if m["options"] == SOCKET]
    assert [m["containerPath"] for m in ipc] == [
        "/run/nvidia-persistenced/socket",
        "/var/run/nvidia-fabricmanager/socket",
        "/tmp/nvidia-mps",
    ]


@pytest.mark.parametrize("exists", [True, False], ids=["empty-root", "missing-root"])
def test_a_root_without_a_driver_gives_only_the_env(tmp_path: Path, exists: bool) -> None:
    root = tmp_path / "root"
    if exists:
        root.mkdir()
    view = Layout(driver_root="/", driver_root_ctr=str(root), dev_root_ctr=str(root))
    assert common_edits(VERSION, view, HookMaker()) == Edits(env=("NVIDIA_VISIBLE_DEVICES=void",))
    assert common_edits("", view, HookMaker()) == Edits(env=("NVIDIA_VISIBLE_DEVICES=void",))


# --- Per GPU: device and DRM nodes.


def _drm_hooks(bus: str, card: str, render: str) -> list[dict[str, Any]]:
    ctk = {"hookName": "createContainer", "path": "/usr/bin/nvidia-ctk"}
    return [
        {
            **ctk,
            "args": [
                "nvidia-ctk",
                "hook",
                "create-symlinks",
                "--link",
                f"../{card}::/dev/dri/by-path/pci-{bus}-card",
                "--link",
                f"../{render}::/dev/dri/by-path/pci-{bus}-render",
            ],
        },
        {**ctk, "args": ["nvidia-ctk", "hook", "chmod", "--mode", "755", "--path", "/dev/dri"]},
    ]


def test_each_gpu_gets_its_own_drm_nodes_and_links(
    fake_root: FakeDriverRoot, dgx: Inventory
) -> None:
    for gpu in dgx.gpus:
        edits = gpu_edits(gpu, layout(fake_root), HookMaker()).to_json()
        card, render = fake_root.drm[gpu.minor]
        assert edits["deviceNodes"] == [
            {"path": path, "hostPath": DRIVER + path}
            for path in (f"/dev/nvidia{gpu.minor}", card, render)
        ]
        bus = sysfs_bus_id(gpu.pci_bus_id)
        assert edits["hooks"] == _drm_hooks(bus, card.split("/")[-1], render.split("/")[-1])


def test_drm_nodes_only_when_the_kernel_and_dev_both_have_them(
    fake_root: FakeDriverRoot, dgx: Inventory
) -> None:
    first, second, third = dgx.gpus[:3]
    # No drm/ directory in sysfs: nvidia-drm is not bound to this GPU.
    shutil.rmtree(fake_root.sysfs / "bus/pci/devices" / sysfs_bus_id(first.pci_bus_id) / "drm")
    # The kernel lists a render node that /dev lacks, and names that are not nodes.
    drm = fake_root.sysfs / "bus/pci/devices" / sysfs_bus_id(second.pci_bus_id) / "drm"
    card, render = (p.split("/")[-1] for p in fake_root.drm[second.minor])
    fake_root.path(f"/dev/dri/{render}").unlink()
    for junk in ("controlD64", "card1x", "renderD", "version"):
        (drm / junk).mkdir()
    # A by-path link that points at another GPU's node is not recreated.
    bus = sysfs_bus_id(third.pci_bus_id)
    link = fake_root.path(f"/dev/dri/by-path/pci-{bus}-card")
    link.unlink()
    link.symlink_to(f"../{fake_root.drm[first.minor][0].split('/')[-1]}")
    view = layout(fake_root)

    assert gpu_edits(first, view, HookMaker()).to_json() == {
        "deviceNodes": [
            {"path": f"/dev/nvidia{first.minor}", "hostPath": f"{DRIVER}/dev/nvidia{first.minor}"}
        ]
    }
    second_edits = gpu_edits(second, view, HookMaker())
    assert [n.path for n in second_edits.device_nodes] == [
        f"/dev/nvidia{second.minor}",
        f"/dev/dri/{card}",
    ]
    bus2 = sysfs_bus_id(second.pci_bus_id)
    assert second_edits.hooks[0].args[3:] == (
        "--link",
        f"../{card}::/dev/dri/by-path/pci-{bus2}-card",
    )
    third_links = gpu_edits(third, view, HookMaker()).hooks[0].args
    assert f"/dev/dri/by-path/pci-{bus}-card" not in " ".join(third_links)
    assert any(arg.endswith(f"pci-{bus}-render") for arg in third_links)


def test_without_by_path_links_only_the_chmod_hook(
    fake_root: FakeDriverRoot, dgx: Inventory
) -> None:
    shutil.rmtree(fake_root.path("/dev/dri/by-path"))
    edits = gpu_edits(dgx.gpus[0], layout(fake_root), HookMaker())
    assert [hook.args[2] for hook in edits.hooks] == ["chmod"]


def test_split_dev_root_takes_nodes_from_the_host_dev(
    tmp_path: Path, driver_libraries: Path, dgx: Inventory
) -> None:
    from .fakeroot import build_driver_root

    fake = build_driver_root(tmp_path / "node", driver_libraries, dgx.gpus, dev=False)
    host = tmp_path / "host"
    make_dev_nodes(host, dgx.gpus)
    split = Layout(
        driver_root=DRIVER,
        driver_root_ctr=str(fake.root),
        dev_root="/",
        dev_root_ctr=str(host),
        sysfs_root=str(fake.sysfs),
    )
    edits = common_edits(VERSION, split, HookMaker()).to_json()
    assert [n["hostPath"] for n in edits["deviceNodes"]] == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-uvm",
        "/dev/nvidiactl",
    ]
    assert all(m["hostPath"] == DRIVER + m["containerPath"] for m in edits["mounts"])
    assert mount_paths(edits) == fake.mounts
    gpu = gpu_edits(dgx.gpus[0], split, HookMaker()).to_json()
    assert [n["hostPath"] for n in gpu["deviceNodes"]] == [
        f"/dev/nvidia{dgx.gpus[0].minor}",
        *fake.drm[dgx.gpus[0].minor],
    ]
    assert len(gpu["hooks"]) == 2


def test_gds_mounts_its_config_and_udev_state(fake_root: FakeDriverRoot) -> None:
    view = layout(fake_root)
    assert gds_edits((), view) == Edits()
    nodes = ("/dev/nvidia-fs0", "/dev/nvidia-fs1")
    assert gds_edits(nodes, view).mounts == ()  # neither file exists yet
    fake_root.path("/etc/cufile.json").write_text("{}")
    fake_root.path("/run/udev").mkdir()
    assert gds_edits(nodes, view).to_json() == {
        "deviceNodes": [{"path": n, "hostPath": DRIVER + n} for n in nodes],
        "mounts": [
            {
                "hostPath": f"{DRIVER}/etc/cufile.json",
                "containerPath": "/etc/cufile.json",
                "options": PLAIN,
            },
            {"hostPath": f"{DRIVER}/run/udev", "containerPath": "/run/udev", "options": PLAIN},
        ],
    }


def test_a_missing_driver_is_reported_once(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    view = Layout(driver_root="/", driver_root_ctr=str(tmp_path / "not-mounted"))
    for _ in range(3):
        common_edits(VERSION, view, HookMaker())
    warnings = [message for level, message in logs if level == "WARNING"]
    assert len(warnings) == 1
    assert "CDI specs carry no driver libraries" in warnings[0]
    assert str(tmp_path / "not-mounted") in warnings[0]


def test_falling_back_to_the_directories_is_reported(
    fake_root: FakeDriverRoot, logs: list[tuple[str, str]]
) -> None:
    _garbage(fake_root.path("/etc/ld.so.cache"))
    assert mount_paths(common(fake_root)) == fake_root.mounts
    assert [(level, "unusable" in message) for level, message in logs] == [("INFO", True)]
