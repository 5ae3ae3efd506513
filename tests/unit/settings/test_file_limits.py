"""The config file is read only as a regular file of at most 1 MiB, and replica
counts that could not fit on any node are refused by ``--check``.

A named pipe at the config path used to hang every caller until something
wrote to it; a 200 MB file took 45 s to parse. Both are now one line, in
milliseconds, in the same style as the other file errors.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from settings import ConfigError, load_config
from settings.capacity import check_replica_counts, most_replicas
from settings.choices import DeviceIdStrategy
from settings.file_reader import CONFIG_FILE_LIMIT, read_config_file


def sliced(replicas: int, *, strategy: str = "uuid") -> str:
    return (
        f"version: v1\nflags:\n  plugin:\n    deviceIDStrategy: {strategy}\n"
        "sharing:\n  timeSlicing:\n    resources:\n"
        f"    - name: nvidia.com/gpu\n      replicas: {replicas}\n"
    )


def test_a_named_pipe_is_a_one_line_error(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as caught:
        load_config([], {}, config_file=str(fifo))
    assert str(caught.value) == (
        f"{fifo}: error opening config file: not a regular file (a named pipe (FIFO))"
    )


def test_a_file_over_the_limit_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"version: v1\n" + b"#" * CONFIG_FILE_LIMIT)
    with pytest.raises(ConfigError) as caught:
        read_config_file(str(path))
    size = path.stat().st_size
    assert str(caught.value) == (
        f"{path}: error reading config file: larger than the 1 MiB limit ({size} bytes)"
    )


def test_a_file_just_under_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    text = b"version: v1\n"
    path.write_bytes(text + b"#" * (CONFIG_FILE_LIMIT - len(text)))
    assert read_config_file(str(path))["config_path"] == str(path)


def test_a_configmap_mount_is_read_through_its_symlinks(tmp_path: Path) -> None:
    stamp = tmp_path / "..2024_01_01_00_00_00.1"
    stamp.mkdir()
    (stamp / "config.yaml").write_text("flags: {migStrategy: mixed}\n")
    (tmp_path / "..data").symlink_to(stamp.name)
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    config = load_config([], {}, config_file=str(tmp_path / "config.yaml"))
    assert config.flags.mig_strategy == "mixed"


def test_a_pipe_leaves_fail_on_init_error_to_the_flag(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as caught:
        load_config([f"--config-file={fifo}"], {})
    assert caught.value.fail_on_init_error is True  # the default: nothing was read
    with pytest.raises(ConfigError) as caught:
        load_config(["--fail-on-init-error=false", f"--config-file={fifo}"], {})
    assert caught.value.fail_on_init_error is False


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [(DeviceIdStrategy.UUID, 67829), (DeviceIdStrategy.INDEX, 179392)],
)
def test_most_replicas_for_one_device(strategy: DeviceIdStrategy, expected: int) -> None:
    # One device with the shortest ID of the strategy, no NUMA node, every
    # replica "Unhealthy": the most that can ever fit in 4 MiB.
    assert most_replicas(strategy) == expected


def test_the_limit_depends_on_the_id_strategy(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(sliced(100_000, strategy="index"))
    check_replica_counts(load_config([], {}, config_file=str(path)))  # index IDs are short
    path.write_text(sliced(100_000))
    with pytest.raises(ConfigError, match=r"resources\[0\]\.replicas: 100000 replicas"):
        check_replica_counts(load_config([], {}, config_file=str(path)))
