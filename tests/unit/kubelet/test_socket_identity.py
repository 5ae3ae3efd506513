"""How the plugin tells one kubelet socket from the next: inode and change time."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from kubelet import paths
from kubelet.paths import socket_identity


def test_each_re_created_socket_has_a_new_identity(sock_dir: Path) -> None:
    path = sock_dir / "kubelet.sock"
    seen = []
    for _ in range(3):
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(path))
            seen.append(socket_identity(path))
        path.unlink()
    assert None not in seen
    assert len(set(seen)) == 3
    assert socket_identity(path) is None


def test_the_same_inode_with_a_new_change_time_is_a_new_socket(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted inode number is often reused at once: the change time tells the two apart."""
    path = sock_dir / "kubelet.sock"
    path.write_text("")
    real = os.stat(path)
    seen = iter([real.st_ctime_ns, real.st_ctime_ns + 1])

    def stat(_: object) -> os.stat_result:
        return os.stat_result(list(real), {"st_ctime_ns": next(seen)})

    monkeypatch.setattr(paths, "os", SimpleNamespace(stat=stat))
    first, second = socket_identity(path), socket_identity(path)
    assert first is not None
    assert second is not None
    assert first[0] == second[0]  # the same inode...
    assert first != second  # ...and still another socket


def test_a_socket_caught_in_its_unlink_reads_as_gone(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stat racing the unlink sees the deletion's change time: not a new kubelet."""
    path = sock_dir / "kubelet.sock"
    path.write_text("")
    real = os.stat(path)
    fields = list(real)
    fields[3] = 0  # st_nlink: the last link already dropped
    unlinking = os.stat_result(fields, {"st_ctime_ns": real.st_ctime_ns})
    # Only this module's view of `os` changes; the rest of the process keeps the real one.
    monkeypatch.setattr(paths, "os", SimpleNamespace(stat=lambda _: unlinking))
    assert socket_identity(path) is None
