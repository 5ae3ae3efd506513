"""What is at the kubelet socket path, told apart before dialing it.

A regular file, a directory, or a socket nobody listens on (left by a kubelet
that stopped) fails the registration at once, saying that nothing is
listening, instead of a ``DEADLINE_EXCEEDED`` after the whole timeout.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kubelet.errors import RegistrationError
from kubelet.registration import check_listening, register
from kubelet_sim import KubeletSimulator


def stale_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))  # bound but never listening, then closed: nobody answers


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda p: p.write_text(""), "it is a regular file", id="regular-file"),
        pytest.param(lambda p: p.mkdir(), "it is a directory", id="directory"),
        pytest.param(stale_socket, "connection refused", id="stale-socket"),
    ],
)
async def test_nothing_listening_fails_at_once(
    sock_dir: Path, make: object, expected: str
) -> None:
    path = sock_dir / "kubelet.sock"
    make(path)  # type: ignore[operator]
    with pytest.raises(RegistrationError) as caught:
        # An hour's timeout: a registration that dialled would wait it out.
        await register(
            kubelet_socket=path, endpoint="x.sock", resource="nvidia.com/gpu", timeout=3600
        )
    message = str(caught.value)
    assert message.startswith(f"nothing is listening on {path}") or message.startswith(
        f"nothing is listening on kubelet socket {path}"
    )
    assert expected in message


def test_a_missing_socket(sock_dir: Path) -> None:
    with pytest.raises(RegistrationError, match="does not exist"):
        check_listening(sock_dir / "kubelet.sock")


def test_a_parent_that_is_not_a_directory(sock_dir: Path) -> None:
    path = sock_dir / "file" / "kubelet.sock"
    (sock_dir / "file").write_text("")  # a path component that is not a directory
    with pytest.raises(RegistrationError, match=r"cannot look at kubelet socket .*Not a directory"):
        check_listening(path)


async def test_a_listening_kubelet_passes(sock_dir: Path) -> None:
    async with KubeletSimulator(sock_dir, write_snapshot_file=False) as sim:
        check_listening(sim.socket_path)


def test_a_listener_with_a_full_backlog_still_counts(sock_dir: Path) -> None:
    path = sock_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as busy:
        busy.bind(str(path))
        busy.listen(0)
        waiting = []
        full = False
        try:
            for _ in range(64):  # fill the backlog: further connects would block
                client = socket.socket(socket.AF_UNIX)
                client.setblocking(False)
                try:
                    client.connect(str(path))
                except BlockingIOError:
                    client.close()
                    full = True
                    break
                waiting.append(client)
            assert full
            check_listening(path)
        finally:
            for client in waiting:
                client.close()


def test_a_socket_of_another_type_names_the_connect_error(sock_dir: Path) -> None:
    """A datagram socket at the path (not a kubelet): the connect's own error, at once."""
    path = sock_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as other:
        other.bind(str(path))
        with pytest.raises(RegistrationError) as caught:
            check_listening(path)
    assert str(caught.value) == (
        f"cannot connect to kubelet socket {path}: Protocol wrong type for socket"
    )


async def test_a_listener_that_never_answers_times_out_with_the_grpc_code(
    sock_dir: Path,
) -> None:
    """Something accepts connections but never speaks gRPC: refused after the timeout."""
    path = sock_dir / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as mute:
        mute.bind(str(path))
        mute.listen(8)
        with pytest.raises(RegistrationError) as caught:
            await register(
                kubelet_socket=path, endpoint="x.sock", resource="nvidia.com/gpu", timeout=0.5
            )
    assert str(caught.value).startswith(
        "kubelet refused registration of nvidia.com/gpu: DEADLINE_EXCEEDED"
    )
