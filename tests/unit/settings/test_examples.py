"""Every example config shipped in config/ loads, and means what the README says."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import (
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharedResource,
    SharingStrategy,
    load_config,
)

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"
MPS_ENV = {"MPS_ROOT": "/run/nvidia/mps"}

# The examples of the reference README's configuration section, by file.
README_EXAMPLES = {
    "plugin-flags.yaml",
    "time-slicing.yaml",
    "time-slicing-rename.yaml",
    "mps.yaml",
    "mps-rename.yaml",
    "dp-example-config0.yaml",
    "dp-example-config1.yaml",
}


def _examples() -> list[Path]:
    return sorted(CONFIG_DIR.glob("*.yaml"))


def test_every_readme_example_is_shipped() -> None:
    assert {path.name for path in _examples()} >= README_EXAMPLES


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name) for p in _examples()])
def test_example_loads_without_warnings(path: Path) -> None:
    config = load_config([], {**MPS_ENV, "CONFIG_FILE": str(path)})
    assert config.warnings == ()
    assert config.config_path == str(path)
    assert len(config.digest) == 64


def test_flags_examples_set_their_mig_strategy_and_leave_the_defaults() -> None:
    for name, mig in [
        ("plugin-flags.yaml", MigStrategy.NONE),
        ("dp-example-config0.yaml", MigStrategy.NONE),
        ("dp-example-config1.yaml", MigStrategy.MIXED),
    ]:
        config = load_config([], {"CONFIG_FILE": str(CONFIG_DIR / name)})
        assert config.flags.mig_strategy is mig
        assert config.flags.fail_on_init_error is True
        assert config.flags.driver_root == "/"
        assert config.flags.pass_device_specs is False
        assert config.flags.device_list_strategy == (DeviceListStrategy.ENVVAR,)
        assert config.flags.device_id_strategy is DeviceIdStrategy.UUID
        assert config.sharing.strategy is SharingStrategy.NONE
        assert config.sources["mig_strategy"] == "file"


@pytest.mark.parametrize(
    ("name", "strategy", "rename", "fail_more_than_one"),
    [
        ("time-slicing.yaml", SharingStrategy.TIME_SLICING, None, False),
        ("time-slicing-rename.yaml", SharingStrategy.TIME_SLICING, "nvidia.com/gpu.shared", False),
        ("mps.yaml", SharingStrategy.MPS, None, True),
        ("mps-rename.yaml", SharingStrategy.MPS, "nvidia.com/gpu.shared", True),
    ],
)
def test_sharing_examples(
    name: str, strategy: SharingStrategy, rename: str | None, fail_more_than_one: bool
) -> None:
    config = load_config([], {**MPS_ENV, "CONFIG_FILE": str(CONFIG_DIR / name)})
    assert config.sharing.strategy is strategy
    assert config.sharing.resources == (SharedResource("nvidia.com/gpu", 10, rename),)
    assert config.sharing.fail_requests_greater_than_one is fail_more_than_one
    assert config.sharing.resources[0].advertised_name == (rename or "nvidia.com/gpu")


def test_imex_example() -> None:
    config = load_config([], {"CONFIG_FILE": str(CONFIG_DIR / "imex.yaml")})
    assert config.flags.imex_channel_ids == (0,)
    assert config.flags.imex_required is True
    assert config.sources["imex_channel_ids"] == "file"
