"""The test injector behaves like a CDI runtime, so the end-to-end test can trust it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .injector import InjectionError, empty_oci_spec, inject, load_registry

KIND = "example.com/gpu"


def write(directory: Path, name: str, spec: Any) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(spec if isinstance(spec, str) else json.dumps(spec))


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True)
    (root / "dev/gpu0").write_text("195:0\n")
    (root / "dev/gpu1").write_text("195:1\n")
    (root / "dev/ctl").write_text("195:255\n")
    (root / "lib").mkdir()
    (root / "lib/libx.so.1").write_text("elf")
    return root


def spec(**common: Any) -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/gpu0"}], "env": ["A=0"]},
            },
            {
                "name": "1",
                "containerEdits": {"deviceNodes": [{"path": "/dev/gpu1"}], "env": ["A=1"]},
            },
        ],
        "containerEdits": common,
    }


def local(host: Path) -> Any:
    return lambda path: host / path.lstrip("/")


def test_common_edits_once_and_device_edits_in_order(tmp_path: Path, host: Path) -> None:
    common = {
        "env": ["VOID=1"],
        "deviceNodes": [{"path": "/dev/ctl"}],
        "mounts": [{"hostPath": "/lib/libx.so.1", "containerPath": "/lib/libx.so.1"}],
        "hooks": [{"hookName": "createContainer", "path": "/bin/hook", "args": ["hook", "x"]}],
    }
    write(tmp_path / "cdi", "a.json", spec(**common))
    oci = inject(empty_oci_spec(), [f"{KIND}=0", f"{KIND}=1"], [tmp_path / "cdi"], local(host))
    assert oci["process"]["env"][1:] == ["VOID=1", "A=1"]  # later value of A wins
    assert [(d["path"], d["major"], d["minor"]) for d in oci["linux"]["devices"]] == [
        ("/dev/ctl", 195, 255),
        ("/dev/gpu0", 195, 0),
        ("/dev/gpu1", 195, 1),
    ]
    assert oci["mounts"] == [
        {"destination": "/lib/libx.so.1", "source": "/lib/libx.so.1", "options": []}
    ]
    assert oci["hooks"] == {"createContainer": [{"path": "/bin/hook", "args": ["hook", "x"]}]}


def test_unknown_names_and_missing_host_files_fail(tmp_path: Path, host: Path) -> None:
    write(
        tmp_path / "cdi", "a.json", spec(mounts=[{"hostPath": "/lib/gone", "containerPath": "/x"}])
    )
    with pytest.raises(InjectionError, match="unresolvable"):
        inject(empty_oci_spec(), [f"{KIND}=7"], [tmp_path / "cdi"], local(host))
    with pytest.raises(InjectionError, match="not a qualified"):
        inject(empty_oci_spec(), ["gpu0"], [tmp_path / "cdi"], local(host))
    with pytest.raises(InjectionError, match="mount source /lib/gone is missing"):
        inject(empty_oci_spec(), [f"{KIND}=0"], [tmp_path / "cdi"], local(host))
    (host / "lib/gone").write_text("")
    (host / "dev/gpu0").unlink()
    with pytest.raises(InjectionError, match="device node /dev/gpu0 is missing"):
        inject(empty_oci_spec(), [f"{KIND}=0"], [tmp_path / "cdi"], local(host))


def test_a_spec_that_does_not_parse_hides_its_devices(tmp_path: Path) -> None:
    write(tmp_path / "cdi", "good.json", spec())
    write(tmp_path / "cdi", "broken.json", "{not json")
    write(tmp_path / "cdi", "wrong.json", {"kind": "other.com/x", "devices": "nope"})
    assert sorted(load_registry([tmp_path / "cdi"])) == [f"{KIND}=0", f"{KIND}=1"]
