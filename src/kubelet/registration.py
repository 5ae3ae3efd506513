"""Registering one resource with the kubelet (`v1beta1.Registration/Register`).

Before dialing, the socket path is looked at: a regular file there, or a
socket nobody listens on (left behind by a kubelet that stopped), would
otherwise surface only as ``DEADLINE_EXCEEDED`` after the whole timeout,
which reads as "the kubelet refused" when in fact nothing is there to refuse.
A unix-socket connect answers at once, so the check costs nothing.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import grpc

from kubelet.api import api_pb2, api_pb2_grpc
from kubelet.errors import RegistrationError
from kubelet.paths import address

API_VERSION = "v1beta1"


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a socket"


def check_listening(kubelet_socket: Path) -> None:
    """Fail fast, naming the reason, unless something listens on ``kubelet_socket``.

    Raises:
        RegistrationError: the path is missing, is not a socket, or nobody listens on it.
    """
    try:
        mode = os.stat(kubelet_socket).st_mode
    except FileNotFoundError:
        raise RegistrationError(f"kubelet socket {kubelet_socket} does not exist") from None
    except OSError as err:
        raise RegistrationError(
            f"cannot look at kubelet socket {kubelet_socket}: {err.strerror}"
        ) from None
    if not stat.S_ISSOCK(mode):
        raise RegistrationError(
            f"nothing is listening on {kubelet_socket}: it is {_kind(mode)}, not the kubelet's "
            "socket"
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(os.fspath(kubelet_socket))
    except BlockingIOError:
        pass  # a listener with a full backlog: it is there, and gRPC will wait for it
    except ConnectionRefusedError:
        raise RegistrationError(
            f"nothing is listening on kubelet socket {kubelet_socket} (connection refused: "
            "a socket left behind by a kubelet that is not running)"
        ) from None
    except OSError as err:
        if err.errno in (None, errno.ENAMETOOLONG, errno.EINVAL):
            return  # a path AF_UNIX cannot name directly; gRPC's resolver copes with it
        raise RegistrationError(
            f"cannot connect to kubelet socket {kubelet_socket}: {err.strerror}"
        ) from None
    finally:
        probe.close()


async def register(
    *, kubelet_socket: Path, endpoint: str, resource: str, timeout: float = 5.0
) -> None:
    """Register `resource`, served on `endpoint` (a socket base name), with the kubelet.

    Raises:
        RegistrationError: nothing listens on the kubelet socket, or the kubelet
            refused the registration or did not answer in time.
    """
    request = api_pb2.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource,
        options=api_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
    )
    check_listening(kubelet_socket)
    # A private subchannel pool: a kubelet socket re-created at the same path
    # must not inherit the reconnect backoff of a channel to the old one.
    async with grpc.aio.insecure_channel(
        address(kubelet_socket), options=[("grpc.use_local_subchannel_pool", 1)]
    ) as channel:
        try:
            await api_pb2_grpc.RegistrationStub(channel).Register(
                request, timeout=timeout, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as err:
            raise RegistrationError(
                f"kubelet refused registration of {resource}: "
                f"{err.code().name}: {err.details()}"
            ) from err
