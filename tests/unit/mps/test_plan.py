"""Which daemons a node needs: real settings, simulated node profiles, the plugin's resources."""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.backends import open_library
from devices.model import Inventory
from mps.errors import MIG_NOT_SUPPORTED, MpsConfigError
from mps.limits import DaemonSpec
from mps.plan import needs_mps, plan_daemons
from resources.errors import ResourceError
from settings import ConfigError, EffectiveConfig, load_config

from .helpers import write_config


def inventory_of(profile: str) -> Inventory:
    library = open_library(profile)
    library.init()
    try:
        return library.inventory()
    finally:
        library.shutdown()


def config(path: Path, *flags: str) -> EffectiveConfig:
    return load_config(["--config-file", str(path), "--mps-root", "/run/nvidia/mps", *flags], {})


def test_dgx_a100_with_ten_replicas(tmp_path: Path) -> None:
    cfg = config(write_config(tmp_path / "c.yaml", replicas=10))
    (spec,) = plan_daemons(cfg, inventory_of("dgx-a100"))
    assert spec.resource == "nvidia.com/gpu"
    assert len(spec.gpu_uuids) == 8
    assert spec.gpu_uuids[0] == "GPU-a0bba3c3-c007-582d-8278-aefa736de776"
    assert spec.memory_limits == tuple((str(i), 4096) for i in range(8))
    assert spec.thread_percentage == 10


@pytest.mark.parametrize(
    ("profile", "replicas", "limit", "percentage"),
    [
        pytest.param("dgx-h100", 2, 40779, 50, id="h100-2"),
        pytest.param("t4x4", 4, 3840, 25, id="t4-4"),
        pytest.param("t4x4", 48, 320, 2, id="t4-48"),
        pytest.param("hgx-16", 3, 27186, 33, id="hgx16-3"),
    ],
)
def test_profiles(tmp_path: Path, profile: str, replicas: int, limit: int, percentage: int) -> None:
    cfg = config(write_config(tmp_path / "c.yaml", replicas=replicas))
    inventory = inventory_of(profile)
    (spec,) = plan_daemons(cfg, inventory)
    assert spec.memory_limits == tuple((str(g.index), limit) for g in inventory.gpus)
    assert spec.thread_percentage == percentage
    assert spec.gpu_uuids == tuple(g.uuid for g in inventory.gpus)


def test_rename_by_default_names_the_daemon_after_the_shared_resource(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", replicas=2, extra="    renameByDefault: true\n")
    (spec,) = plan_daemons(config(path), inventory_of("t4x4"))
    assert spec.resource == "nvidia.com/gpu.shared"


def test_time_slicing_needs_no_daemon(tmp_path: Path) -> None:
    cfg = config(write_config(tmp_path / "c.yaml", section="timeSlicing"))
    assert not needs_mps(cfg.sharing)
    assert plan_daemons(cfg, inventory_of("dgx-a100")) == ()


def test_no_config_needs_no_daemon() -> None:
    cfg = load_config([], {})
    assert not needs_mps(cfg.sharing)
    assert plan_daemons(cfg, inventory_of("dgx-a100")) == ()


def test_node_without_gpus_gets_no_daemon(tmp_path: Path) -> None:
    cfg = config(write_config(tmp_path / "c.yaml"))
    assert needs_mps(cfg.sharing)
    assert plan_daemons(cfg, inventory_of("no-gpus")) == ()


def test_mig_devices_are_refused(tmp_path: Path) -> None:
    cfg = config(write_config(tmp_path / "c.yaml", replicas=2), "--mig-strategy", "single")
    with pytest.raises(ResourceError) as caught:
        plan_daemons(cfg, inventory_of("a100-mig-single"))
    assert str(caught.value) == MIG_NOT_SUPPORTED
    assert MIG_NOT_SUPPORTED == "sharing using MPS is not supported for MIG devices"


def test_replicas_over_the_cap_are_refused(tmp_path: Path) -> None:
    cfg = config(write_config(tmp_path / "c.yaml", replicas=49))
    with pytest.raises(MpsConfigError) as caught:
        plan_daemons(cfg, inventory_of("dgx-a100"))
    assert str(caught.value) == (
        "invalid MPS configuration: invalid device maximum allowed replicas exceeded: 49 > 48"
    )


def test_older_gpus_have_the_lower_cap(tmp_path: Path) -> None:
    profile = tmp_path / "v100.yaml"
    profile.write_text(
        'driverVersion: "535.54.03"\n'
        'cudaDriverVersion: "12.2"\n'
        "gpus:\n"
        "  - uuid: GPU-11111111-2222-3333-4444-555555555555\n"
        '    name: "Tesla V100-SXM2-16GB"\n'
        "    memoryMiB: 16384\n"
        '    pciBusID: "00000000:06:00.0"\n'
        "    numaNode: 0\n"
        '    computeCapability: "7.0"\n'
    )
    cfg16 = config(write_config(tmp_path / "ok.yaml", replicas=16))
    (spec,) = plan_daemons(cfg16, inventory_of(str(profile)))
    assert spec == DaemonSpec(
        resource="nvidia.com/gpu",
        gpu_uuids=("GPU-11111111-2222-3333-4444-555555555555",),
        memory_limits=(("0", 1024),),
        thread_percentage=6,
    )
    cfg17 = config(write_config(tmp_path / "bad.yaml", replicas=17))
    with pytest.raises(MpsConfigError, match=r"exceeded: 17 > 16$"):
        plan_daemons(cfg17, inventory_of(str(profile)))


def test_settings_refuse_mixed_mig_strategy_with_mps(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match="using --mig-strategy=mixed is not supported with MPS"):
        config(path, "--mig-strategy", "mixed")
