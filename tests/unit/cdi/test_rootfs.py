"""Symlinks resolved inside a mounted host tree, never into the plugin container's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cdi.rootfs import RootView


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15").write_text("elf")
    (root / "lib").symlink_to("usr/lib")
    return root


def test_absolute_links_stay_in_the_tree(tree: Path) -> None:
    libdir = tree / "usr/lib/x86_64-linux-gnu"
    (libdir / "libcuda.so.1").symlink_to("/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15")
    view = RootView(str(tree))
    assert view.resolve("/lib/x86_64-linux-gnu/libcuda.so.1") == (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    )
    assert view.is_file("/lib/x86_64-linux-gnu/libcuda.so.1")
    assert view.local("/usr/lib") == f"{tree}/usr/lib"


def test_dotdot_is_clamped_at_the_root(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "outside").write_text("secret")
    (tree / "escape").symlink_to("../../../../../outside")
    view = RootView(str(tree))
    assert view.resolve("/escape") is None  # /outside inside the tree: absent
    (tree / "outside").write_text("inside")
    assert view.resolve("/escape") == "/outside"
    assert view.resolve("/../../usr/lib") == "/usr/lib"


@pytest.mark.parametrize(
    ("links", "path"),
    [
        pytest.param({"a": "b", "b": "a"}, "/a", id="loop"),
        pytest.param({"self": "self"}, "/self", id="self-loop"),
        pytest.param({"dangling": "/nowhere/at/all"}, "/dangling", id="dangling"),
        pytest.param({}, "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15/x", id="file-as-dir"),
        pytest.param({}, "/missing/file", id="missing"),
    ],
)
def test_unresolvable_paths_are_none(tree: Path, links: dict[str, str], path: str) -> None:
    for name, target in links.items():
        (tree / name).symlink_to(target)
    view = RootView(str(tree))
    assert view.resolve(path) is None
    assert not view.is_file(path)
    assert not view.is_dir(path)
    assert view.stat(path) is None
    assert view.listdir(path) == []


def test_a_missing_root_has_nothing(tmp_path: Path) -> None:
    view = RootView(str(tmp_path / "no-such-root"))
    assert view.listdir("/") == []
    assert not view.is_dir("/")
    assert not view.is_file("/etc/ld.so.cache")


def test_probes_check_the_kind_of_file(tree: Path) -> None:
    (tree / "bin").mkdir()
    (tree / "bin/tool").write_text("#!/bin/sh\n")
    (tree / "bin/run").write_text("#!/bin/sh\n")
    (tree / "bin/run").chmod(0o755)
    os.mkfifo(tree / "bin/fifo")
    view = RootView(str(tree))
    assert not view.is_executable("/bin/tool")
    assert view.is_executable("/bin/run")
    assert not view.is_file("/bin/fifo")
    assert not view.is_socket("/bin/fifo")
    assert view.listdir("/bin") == ["fifo", "run", "tool"]
    assert view.is_dir("/lib/x86_64-linux-gnu")


def test_readlink_resolves_only_the_directory(tree: Path) -> None:
    (tree / "usr/dri").mkdir()
    (tree / "usr/dri/by-path").mkdir()
    (tree / "usr/dri/by-path/pci-card").symlink_to("../card1")
    (tree / "dri").symlink_to("/usr/dri")
    view = RootView(str(tree))
    assert view.readlink("/dri/by-path/pci-card") == "../card1"
    assert view.readlink("/dri/by-path/missing") is None
    assert view.readlink("/usr/lib") is None  # not a link


def test_the_container_root_itself(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    view = RootView("/")
    assert view.local(str(target)) == str(target)
    assert view.resolve(str(target)) == os.path.realpath(target)
