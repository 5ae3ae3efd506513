"""The CDI spec files as an actuator, alone, against a real directory.

What it writes is read back and compared, names in use survive a spec that
no longer has them until they are released, and every way the directory can
be broken is a reported, retried failure (never an exception, never a hang).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from reconciler.actuators.cdi import CdiSpecs, CdiWriteError, defined_names

KIND = "k8s.device-plugin.nvidia.com/gpu"
FILE = "k8s.device-plugin.nvidia.com-gpu.json"


def spec(*names: str, kind: str = KIND) -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [
            {"name": n, "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{i}"}]}}
            for i, n in enumerate(names)
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
    }


def names(*devices: str, kind: str = KIND) -> frozenset[str]:
    return frozenset(f"{kind}={d}" for d in devices)


def on_disk(path: Path) -> frozenset[str]:
    return defined_names(json.loads(path.read_text()))


def test_writes_then_leaves_an_unchanged_file_alone(tmp_path: Path) -> None:
    cdi = CdiSpecs()
    outcome = cdi.converge(str(tmp_path), [spec("GPU-a", "GPU-b")], frozenset())
    assert outcome.converged
    assert outcome.files == (f"wrote {FILE}",)
    written = tmp_path / FILE
    assert on_disk(written) == names("GPU-a", "GPU-b")
    assert oct(written.stat().st_mode & 0o777) == "0o644"
    assert cdi.names() == names("GPU-a", "GPU-b")
    stamp = written.stat().st_mtime_ns
    assert not cdi.pending(str(tmp_path), [spec("GPU-a", "GPU-b")], frozenset())
    again = cdi.converge(str(tmp_path), [spec("GPU-a", "GPU-b")], frozenset())
    assert again.converged
    assert again.files == ()
    assert written.stat().st_mtime_ns == stamp


def test_names_in_use_stay_until_released(tmp_path: Path) -> None:
    cdi = CdiSpecs()
    cdi.converge(str(tmp_path), [spec("GPU-a", "GPU-b")], frozenset())
    # the device ID strategy changed: the new names first, the old ones kept while in use
    step = cdi.converge(str(tmp_path), [spec("0", "1")], names("GPU-a", "GPU-b"))
    assert step.converged
    assert on_disk(tmp_path / FILE) == names("0", "1", "GPU-a", "GPU-b")
    assert cdi.pending(str(tmp_path), [spec("0", "1")], names("0", "1"))
    pruned = cdi.converge(str(tmp_path), [spec("0", "1")], names("0", "1"))
    assert pruned.converged
    assert on_disk(tmp_path / FILE) == names("0", "1")


def test_a_class_no_longer_wanted_is_removed_once_unused(tmp_path: Path) -> None:
    imex = "k8s.device-plugin.nvidia.com/imex-channel"
    cdi = CdiSpecs()
    cdi.converge(str(tmp_path), [spec("GPU-a"), spec("0", kind=imex)], frozenset())
    channel_file = tmp_path / "k8s.device-plugin.nvidia.com-imex-channel.json"
    assert channel_file.exists()
    kept = cdi.converge(str(tmp_path), [spec("GPU-a")], names("0", kind=imex))
    assert kept.converged
    assert channel_file.exists()
    removed = cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset())
    assert removed.files == (f"removed {channel_file.name}",)
    assert not channel_file.exists()


def test_a_file_changed_or_deleted_underneath_is_repaired(tmp_path: Path) -> None:
    cdi = CdiSpecs()
    cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset())
    assert not cdi.pending(str(tmp_path), [spec("GPU-a")], frozenset())
    (tmp_path / FILE).unlink()
    assert cdi.pending(str(tmp_path), [spec("GPU-a")], frozenset())  # one stat tells
    assert cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset()).files == (f"wrote {FILE}",)
    (tmp_path / FILE).write_text("{ truncated")
    assert cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset()).files == (f"wrote {FILE}",)
    assert on_disk(tmp_path / FILE) == names("GPU-a")


def test_directory_in_the_way_fails_then_lands(tmp_path: Path) -> None:
    target = tmp_path / "cdi"
    target.write_text("a regular file where the directory should be\n")
    cdi = CdiSpecs()
    failed = cdi.converge(str(target), [spec("GPU-a")], frozenset())
    assert not failed.converged
    assert isinstance(failed.error, CdiWriteError)
    assert str(failed.error).startswith("cannot write CDI specs to ")
    assert cdi.names() == frozenset()  # nothing counts as written
    target.unlink()
    assert cdi.converge(str(target), [spec("GPU-a")], frozenset()).converged
    assert cdi.names() == names("GPU-a")


def test_a_fifo_or_link_at_the_spec_path_is_replaced_and_a_directory_is_reported(
    tmp_path: Path,
) -> None:
    cdi = CdiSpecs()
    os.mkfifo(tmp_path / FILE)  # must neither block nor be kept
    assert cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset()).converged
    assert on_disk(tmp_path / FILE) == names("GPU-a")
    (tmp_path / FILE).unlink()
    (tmp_path / FILE).mkdir()
    failed = cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset())
    assert not failed.converged
    assert isinstance(failed.error, CdiWriteError)
    shutil.rmtree(tmp_path / FILE)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    (tmp_path / FILE).symlink_to(elsewhere)
    assert cdi.converge(str(tmp_path), [spec("GPU-a")], frozenset()).converged
    assert not (tmp_path / FILE).is_symlink()
    assert elsewhere.read_text() == "{}"  # the link was replaced, its target left alone


def test_full_directory_fails_then_lands(full_tmpfs: Path) -> None:
    cdi = CdiSpecs()
    big = spec(*(f"GPU-{i:04d}" for i in range(100)))
    failed = cdi.converge(str(full_tmpfs), [big], frozenset())
    assert not failed.converged
    assert "No space left on device" in str(failed.error)
    assert [p.name for p in full_tmpfs.iterdir()] == ["filler"]  # no temp file left behind
    (full_tmpfs / "filler").unlink()
    assert cdi.converge(str(full_tmpfs), [big], frozenset()).converged
