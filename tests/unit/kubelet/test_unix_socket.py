"""A served socket is moved into place ready, and stopping it never removes another's."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from kubelet.errors import ServeError
from kubelet.unix_socket import ServedSocket

HANDLERS: tuple[grpc.GenericRpcHandler, ...] = ()


async def test_stopping_leaves_a_socket_that_replaced_ours_in_place(sock_dir: Path) -> None:
    """As in a rolling update: the new pod's socket took the path before the old one stops."""
    path = sock_dir / "nvidia-gpu.sock"
    old = ServedSocket(path)
    await old.serve(HANDLERS, timeout=5, create_directory=False)
    assert old.intact()
    path.unlink()
    with socket.socket(socket.AF_UNIX) as newcomer:
        newcomer.bind(str(path))
        assert not old.intact()
        await old.close(0)
        assert path.exists()  # the newcomer's socket is still there
    assert not old.running


async def test_serving_again_replaces_a_stale_file_and_close_removes_ours(sock_dir: Path) -> None:
    path = sock_dir / "nvidia-gpu.sock"
    path.write_text("left by an earlier run\n")
    served = ServedSocket(path)
    await served.serve(HANDLERS, timeout=5, create_directory=False)
    assert served.intact()
    assert not list(sock_dir.glob(".*"))  # no staging name left behind
    await served.close(0)
    assert not path.exists()


async def test_a_missing_kubelet_directory_is_not_created(sock_dir: Path) -> None:
    path = sock_dir / "device-plugins" / "nvidia-gpu.sock"
    with pytest.raises(ServeError):
        await ServedSocket(path).serve(HANDLERS, timeout=5, create_directory=False)
    assert not path.parent.exists()
