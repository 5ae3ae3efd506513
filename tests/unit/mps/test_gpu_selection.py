"""The MPS daemons serve, and set the compute mode of, only the GPUs the lists leave in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from devices.backends import open_library
from devices.model import Inventory
from mps.layout import CONTAINER_ROOT
from mps.node_config import daemon_inputs, load_daemon_config
from mps.plan import plan_daemons
from mps.service import load_specs
from settings import SetValue, load_config

from .helpers import write_config

GPU3 = "GPU-184b362b-70e2-50de-b227-3a382639ed11"


def dgx() -> Inventory:
    library = open_library("dgx-a100")
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


def test_the_daemon_plan_leaves_the_excluded_gpu_out(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", replicas=4)
    argv = ["--config-file", str(path), "--mps-root", "/run/nvidia/mps"]
    (spec,) = plan_daemons(load_config([*argv, "--exclude-devices", "3"], {}), dgx())
    assert len(spec.gpu_uuids) == 7
    assert GPU3 not in spec.gpu_uuids
    assert [index for index, _ in spec.memory_limits] == ["0", "1", "2", "4", "5", "6", "7"]


def test_the_file_keys_choose_the_gpus_of_the_daemon(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", replicas=2)
    path.write_text(
        "flags:\n  plugin:\n    includeDevices: [0, 1, 2]\n    excludeDevices: ['0000:07:00.0']\n"
        + path.read_text()
    )
    config = load_config(["--config-file", str(path), "--mps-root", "/run/nvidia/mps"], {})
    (spec,) = plan_daemons(config, dgx())
    assert [index for index, _ in spec.memory_limits] == ["1", "2"]


def test_a_selection_of_no_gpu_plans_no_daemon(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", replicas=4)
    config = load_config(
        ["--config-file", str(path), "--mps-root", "/m", "--include-devices", "8"], {}
    )
    assert plan_daemons(config, dgx()) == ()


def test_a_change_of_the_lists_is_a_change_of_the_daemons(tmp_path: Path) -> None:
    base = write_config(tmp_path / "base.yaml", replicas=4)
    excluded = tmp_path / "excluded.yaml"
    excluded.write_text("flags:\n  plugin:\n    excludeDevices: [3]\n" + base.read_text())
    none: dict[str, SetValue] = {}

    def inputs(path: Path) -> object:
        return daemon_inputs(load_daemon_config(none, {"CONFIG_FILE": str(path)}, CONTAINER_ROOT))

    assert inputs(base) != inputs(excluded)


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    records: list[str] = []
    handler = logger.add(lambda m: records.append(m.record["message"]), level="WARNING")
    try:
        yield records
    finally:
        logger.remove(handler)


def test_load_specs_warns_about_an_entry_that_matches_no_gpu(
    tmp_path: Path, warnings_logged: list[str]
) -> None:
    path = write_config(tmp_path / "c.yaml", replicas=4)
    config = load_config(
        ["--config-file", str(path), "--mps-root", "/m", "--mock-nvml", "dgx-a100"],
        {"EXCLUDE_DEVICES": "3,GPU-00000000-0000-0000-0000-000000000000"},
    )
    specs, library = load_specs(config)
    assert library is not None
    library.shutdown()
    (spec,) = specs
    assert GPU3 not in spec.gpu_uuids
    assert warnings_logged == [
        "environment: EXCLUDE_DEVICES: UUID GPU-00000000-0000-0000-0000-000000000000 matches no "
        "GPU on this node"
    ]
