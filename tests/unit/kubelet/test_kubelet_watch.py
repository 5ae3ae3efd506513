"""`KubeletWatch`: each kubelet socket seen is a generation; each after the first, a restart."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kubelet import kubelet_watch
from kubelet.kubelet_watch import UNREGISTERED, KubeletWatch


def serve(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    return listener


def test_generations_count_kubelets_and_restarts_are_taken_once(sock_dir: Path) -> None:
    path = sock_dir / "kubelet.sock"
    watch = KubeletWatch(path)
    assert watch.look() is None  # no kubelet yet
    with serve(path):
        assert watch.look() == 1
        assert watch.look() == 1  # the same socket is the same kubelet
        assert watch.take_restarts() == 0  # the first kubelet is no restart
    path.unlink()
    assert watch.look() is None  # between a kubelet's delete and its successor's create
    for generation in (2, 3):
        with serve(path):
            assert watch.look() == generation
        path.unlink()
    assert watch.restarts == 2
    assert watch.unrecorded == 2
    assert watch.take_restarts() == 2
    assert watch.take_restarts() == 0  # recorded once


def test_an_older_socket_seen_again_is_not_a_new_kubelet(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    identities = iter([(7, 1), (8, 2), (7, 1)])
    monkeypatch.setattr(kubelet_watch, "socket_identity", lambda path: next(identities))
    watch = KubeletWatch(sock_dir / "kubelet.sock")
    assert [watch.look(), watch.look(), watch.look()] == [1, 2, 1]
    assert watch.restarts == 1


def test_without_registration_there_is_one_constant_generation() -> None:
    watch = KubeletWatch(None)
    assert watch.look() == UNREGISTERED
    assert watch.restarts == 0
