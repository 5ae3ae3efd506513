"""`read_small_file`: regular files only, never blocking, never more than the cap.

Every case runs the read in a worker thread joined with a timeout, so a read
that blocks (the failure this guards against) fails the test instead of
hanging it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from foundation.files import MIB, FileRejected, read_small_file, regular_file_fd

READ_TIMEOUT = 5.0


def read_soon(path: Path | str, limit: int = MIB) -> bytes | FileRejected:
    """The outcome of reading `path`, which must come within READ_TIMEOUT seconds."""
    outcome: list[bytes | FileRejected] = []

    def run() -> None:
        try:
            outcome.append(read_small_file(path, limit=limit))
        except FileRejected as rejected:
            outcome.append(rejected)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(READ_TIMEOUT)
    assert not worker.is_alive(), f"reading {path} blocked"
    return outcome[0]


def reason(path: Path | str, limit: int = MIB) -> str:
    outcome = read_soon(path, limit)
    assert isinstance(outcome, FileRejected), f"{path} was read: {outcome[:40]!r}"
    return outcome.reason


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"version: v1\n")
    assert read_soon(path) == b"version: v1\n"


def test_a_file_exactly_at_the_limit_is_read_and_one_byte_more_is_not(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1000)
    assert read_soon(path, limit=1000) == b"x" * 1000
    assert reason(path, limit=999) == "larger than the 999 bytes limit (1000 bytes)"
    path.write_bytes(b"x" * (2 * MIB))
    assert reason(path) == f"larger than the 1 MiB limit ({2 * MIB} bytes)"


def test_a_file_that_claims_no_size_is_still_read_only_up_to_the_limit() -> None:
    # Files under /proc report a size of 0 and have content: the read itself is capped.
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs /proc")
    assert reason(maps, limit=16) == "larger than the 16 bytes limit (more than that)"


def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    assert reason(fifo) == "not a regular file (a named pipe (FIFO))"


def test_a_directory_is_refused_in_the_usual_words(tmp_path: Path) -> None:
    assert reason(tmp_path) == "Is a directory"


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        assert reason(path) == "not a regular file (a socket)"


def test_an_endless_device_is_refused() -> None:
    assert reason("/dev/zero") == "not a regular file (a character device)"


def test_the_null_device_reads_as_empty() -> None:
    assert read_soon("/dev/null") == b""


def test_a_missing_file_gives_the_system_words(tmp_path: Path) -> None:
    assert reason(tmp_path / "absent.yaml") == "No such file or directory"


def test_a_configmap_layout_of_symlinks_is_followed(tmp_path: Path) -> None:
    # The kubelet mounts a ConfigMap as <dir>/<key> -> ..data/<key>, ..data -> ..<timestamp>.
    stamp = tmp_path / "..2024_01_01_00_00_00.000000001"
    stamp.mkdir()
    (stamp / "config.yaml").write_bytes(b"version: v1\n")
    (tmp_path / "..data").symlink_to(stamp.name)
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    assert read_soon(tmp_path / "config.yaml") == b"version: v1\n"


def test_a_symlink_to_a_named_pipe_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "config.yaml").symlink_to("pipe")
    assert reason(tmp_path / "config.yaml") == "not a regular file (a named pipe (FIFO))"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda path: os.mkfifo(path), id="fifo"),
        pytest.param(lambda path: path.mkdir(), id="directory"),
    ],
)
def test_the_descriptor_helper_opens_regular_files_only(
    tmp_path: Path, make: Callable[[Path], None]
) -> None:
    path = tmp_path / "thing"
    make(path)
    with pytest.raises(FileRejected):
        os.close(regular_file_fd(path))
    regular = tmp_path / "regular"
    regular.write_bytes(b"ok")
    fd = regular_file_fd(regular)
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)
