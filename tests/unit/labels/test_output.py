"""The features file: format, atomic replacement, permissions, withdrawal."""

from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path

import pytest

from labels.errors import LabelError
from labels.output import (
    FileSink,
    LabelSink,
    PublishError,
    StreamSink,
    format_labels,
    parse_labels,
)

LABELS = {
    "nvidia.com/gpu.product": "Tesla-T4",
    "nvidia.com/cuda.driver.rev": "",
    "nvidia.com/gfd.timestamp": "1724632719",
}


def test_format_is_sorted_key_value_lines() -> None:
    assert format_labels(LABELS) == (
        "nvidia.com/cuda.driver.rev=\n"
        "nvidia.com/gfd.timestamp=1724632719\n"
        "nvidia.com/gpu.product=Tesla-T4\n"
    )
    assert parse_labels(format_labels(LABELS)) == LABELS


def test_parse_reads_like_nfd() -> None:
    text = "# comment\n\n  a=b=c  \nflag\nempty=\n"
    assert parse_labels(text) == {"a": "b=c", "flag": "true", "empty": ""}


def test_file_sink_writes_0644_atomically(tmp_path: Path) -> None:
    os.umask(0o077)  # the mode must not depend on the process umask
    try:
        sink = FileSink(tmp_path / "gfd")
        sink.publish(LABELS)
    finally:
        os.umask(0o022)
    path = tmp_path / "gfd"
    assert path.read_text() == format_labels(LABELS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["gfd"]
    assert isinstance(sink, LabelSink)


def test_file_sink_replaces_the_inode(tmp_path: Path) -> None:
    path = tmp_path / "gfd"
    sink = FileSink(path)
    sink.publish(LABELS)
    reader = path.open()  # a reader holding the old file keeps reading whole content
    before = path.stat().st_ino
    sink.publish({"nvidia.com/gpu.count": "2"})
    assert path.stat().st_ino != before
    assert reader.read() == format_labels(LABELS)
    reader.close()
    assert parse_labels(path.read_text()) == {"nvidia.com/gpu.count": "2"}


def test_file_sink_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(LabelError, match=r"^cannot write .*/missing/gfd: ") as missing:
        FileSink(tmp_path / "missing" / "gfd").publish(LABELS)
    assert not isinstance(missing.value, PublishError)  # it will not pass by itself: exit 1
    target = tmp_path / "gfd"
    target.mkdir()  # renaming a file onto a directory fails
    with pytest.raises(LabelError, match=r"^cannot write"):
        FileSink(target).publish(LABELS)
    assert [p.name for p in tmp_path.iterdir()] == ["gfd"]


def test_a_full_file_system_is_retried_and_keeps_the_old_labels(full_tmpfs: Path) -> None:
    path = full_tmpfs / "gfd"
    sink = FileSink(path)
    (full_tmpfs / "filler").unlink()
    sink.publish(LABELS)
    with (full_tmpfs / "filler").open("wb") as handle, contextlib.suppress(OSError):
        handle.write(b"x" * (1 << 20))
    bigger = {**LABELS, **{f"nvidia.com/extra.{n}": "x" * 60 for n in range(100)}}
    with pytest.raises(PublishError, match=r"^cannot write .*/gfd: No space left on device"):
        sink.publish(bigger)
    assert parse_labels(path.read_text()) == LABELS  # NFD still reads the last labels
    assert sorted(p.name for p in full_tmpfs.iterdir()) == ["filler", "gfd"]
    (full_tmpfs / "filler").unlink()
    sink.publish(bigger)
    assert parse_labels(path.read_text()) == bigger


def test_withdraw_removes_the_file_and_old_staging_dir(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "gfd")
    sink.publish(LABELS)
    staging = tmp_path / "gfd-tmp"
    staging.mkdir()
    (staging / "gfd").write_text("old\n")
    (tmp_path / "other-source").write_text("x=y\n")
    sink.withdraw()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other-source"]
    sink.withdraw()  # nothing left to remove: no error


def test_stream_sink_prints_the_same_format() -> None:
    stream = io.StringIO()
    sink = StreamSink(stream)
    sink.publish(LABELS)
    sink.withdraw()
    assert stream.getvalue() == format_labels(LABELS)
