"""The effective config: frozen, digested by value, with origins and warnings."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from settings import ConfigError, EffectiveConfig, MigStrategy, SharingStrategy, load_config
from settings.effective import Rejected
from settings.flags import SETTINGS_SPECS

SHARED = """
version: v1
flags:
  migStrategy: single
  plugin:
    deviceListStrategy: [cdi-cri, envvar]
sharing:
  timeSlicing:
    failRequestsGreaterThanOne: true
    resources:
    - name: gpu
      replicas: 4
"""


def test_same_values_from_different_sources_have_the_same_digest(
    write_config: Callable[[str], str],
) -> None:
    in_file = write_config("flags: {migStrategy: mixed, plugin: {deviceIDStrategy: index}}")
    from_file = load_config([], {}, config_file=in_file)
    from_flags = load_config(["--mig-strategy=mixed", "--device-id-strategy=index"], {})
    assert from_file.digest == from_flags.digest
    assert from_file == from_flags
    assert from_file.sources["mig_strategy"] == "file"
    assert from_flags.sources["mig_strategy"] == "flag"


def test_list_order_does_not_change_the_digest() -> None:
    one = load_config(["--device-list-strategy=envvar,cdi-cri"], {})
    other = load_config(["--device-list-strategy=cdi-cri,envvar,envvar"], {})
    assert one.digest == other.digest


@pytest.mark.parametrize(
    "argv",
    [
        ["--mig-strategy=mixed"],
        ["--fail-on-init-error=false"],
        ["--health-quiet-period=61"],
        ["--device-list-strategy=envvar,volume-mounts"],
        ["--state-address=0.0.0.0:9040"],
    ],
)
def test_any_value_change_changes_the_digest(argv: list[str]) -> None:
    assert load_config(argv, {}).digest != load_config([], {}).digest


def test_sharing_change_changes_the_digest(write_config: Callable[[str, str], str]) -> None:
    four = write_config(SHARED, "four.yaml")
    five = write_config(SHARED.replace("replicas: 4", "replicas: 5"), "five.yaml")
    assert (
        load_config([], {}, config_file=four).digest != load_config([], {}, config_file=five).digest
    )


def test_config_is_frozen_and_hashable(write_config: Callable[[str], str]) -> None:
    config = load_config([], {}, config_file=write_config(SHARED))
    with pytest.raises(ValidationError, match="frozen"):
        config.digest = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        config.flags.mig_strategy = MigStrategy.NONE
    with pytest.raises(TypeError):
        config.sources["mig_strategy"] = "flag"  # type: ignore[index]
    assert hash(config) == hash(load_config([], {}, config_file=write_config(SHARED)))


def test_digest_cannot_be_supplied() -> None:
    base = load_config([], {})
    assert EffectiveConfig(flags=base.flags).digest == base.digest  # worked out of the values
    with pytest.raises(Rejected, match="digest"):
        EffectiveConfig(flags=base.flags, digest="0" * 64)


def test_to_json_is_one_json_record(write_config: Callable[[str], str]) -> None:
    path = write_config(SHARED)
    config = load_config(["--mps-root=/m"], {"CONFIG_FILE": path})
    dumped = json.dumps(config.to_json(), separators=(",", ":"))
    assert "\n" not in dumped
    data = json.loads(dumped)
    assert data["digest"] == config.digest
    assert data["config_path"] == path
    assert data["flags"]["mig_strategy"] == "single"
    assert data["flags"]["device_list_strategy"] == ["envvar", "cdi-cri"]
    assert data["sources"]["mig_strategy"] == "file"
    assert data["sources"]["mps_root"] == "flag"
    assert data["sources"]["kubelet_socket"] == "default"
    assert data["sharing"] == {
        "strategy": "time-slicing",
        "rename_by_default": False,
        "fail_requests_greater_than_one": True,
        "resources": [
            {
                "name": "nvidia.com/gpu",
                "replicas": 4,
                "rename": None,
                "devices": "all",
                "distinct_devices": None,
                "where": "sharing.timeSlicing.resources[0]",
            }
        ],
    }


def test_every_setting_has_an_origin() -> None:
    config = load_config([], {})
    assert set(config.sources) == {spec.field for spec in SETTINGS_SPECS}
    assert set(config.sources.values()) == {"default"}


def test_mps_defaults_fail_requests_greater_than_one(write_config: Callable[[str], str]) -> None:
    text = "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    config = load_config(["--mps-root=/m"], {}, config_file=write_config(text))
    assert config.sharing.strategy is SharingStrategy.MPS
    assert config.sharing.fail_requests_greater_than_one is True
    explicit = text.replace("{resources", "{failRequestsGreaterThanOne: false, resources")
    config = load_config(["--mps-root=/m"], {}, config_file=write_config(explicit))
    assert config.sharing.fail_requests_greater_than_one is False


def test_ignored_fields_are_warned_about(write_config: Callable[[str], str]) -> None:
    path = write_config(
        "version: v1\n"
        "resources:\n  gpus:\n  - pattern: 'A100*'\n    name: a100\n"
        "sharing:\n  timeSlicing:\n    resources:\n"
        "    - name: gpu\n      replicas: 2\n      rename: gpu-shared\n      devices: [0, 1]\n"
        "    - name: mig-1g.5gb\n      replicas: 3\n      devices: all\n"
        "flags:\n  plugin:\n    deviceListStrategy: envvar\n    unknownThing: 1\n"
    )
    config = load_config([], {}, config_file=path)
    assert config.warnings == (
        f"{path}: flags.plugin.unknownThing: unknown key, ignored",
        f"{path}: sharing.timeSlicing.resources[0].rename: Setting the 'rename' field in "
        "sharing.timeSlicing.resources is not yet supported in the config. Ignoring...",
        f"{path}: resources: Customizing the 'resources' field is not yet supported in the "
        "config. Ignoring...",
    )
    names = [(r.name, r.replicas, r.rename, r.devices) for r in config.sharing.resources]
    assert names == [
        ("nvidia.com/gpu", 2, None, (0, 1)),
        ("nvidia.com/mig-1g.5gb", 3, None, "all"),
    ]
    assert [(r.pattern, r.name) for r in config.resources.gpus] == [("A100*", "nvidia.com/a100")]


def test_rename_matching_the_default_is_not_a_warning(write_config: Callable[[str], str]) -> None:
    text = (
        "sharing: {timeSlicing: {renameByDefault: true, resources: "
        "[{name: gpu, replicas: 2, rename: gpu.shared}]}}"
    )
    config = load_config([], {}, config_file=write_config(text))
    assert config.warnings == ()
    assert config.sharing.resources[0].advertised_name == "nvidia.com/gpu.shared"


def test_reference_file_leniencies(write_config: Callable[[str], str]) -> None:
    """JSON, YAML 1.1 booleans, key case, first document only, empty file."""
    as_json = write_config('{"version": "v1", "flags": {"migStrategy": "single"}}')
    assert load_config([], {}, config_file=as_json).flags.mig_strategy == "single"
    yaml11 = write_config("flags: {failOnInitError: n, gdsEnabled: yes, mofedEnabled: on}")
    flags = load_config([], {}, config_file=yaml11).flags
    assert (flags.fail_on_init_error, flags.gds_enabled, flags.mofed_enabled) == (False, True, True)
    cased = write_config(
        "VERSION: v1\nFlags: {MigStrategy: mixed, Plugin: {deviceIdStrategy: index}}"
    )
    flags = load_config([], {}, config_file=cased).flags
    assert (flags.mig_strategy, flags.device_id_strategy) == ("mixed", "index")
    documents = write_config("flags: {migStrategy: single}\n---\nversion: v9\n")
    assert load_config([], {}, config_file=documents).flags.mig_strategy == "single"
    for empty in ("", "# only a comment\n", "---\n", "null\n"):
        config = load_config([], {}, config_file=write_config(empty))
        assert config == load_config([], {})
    assert load_config([], {}, config_file="/dev/null") == load_config([], {})


def test_null_means_not_given(write_config: Callable[[str], str]) -> None:
    path = write_config("flags: {migStrategy: ~, failOnInitError: null, plugin: ~}\nsharing: ~")
    config = load_config([], {}, config_file=path)
    assert config == load_config([], {})
    assert config.sources["mig_strategy"] == "default"


def test_gfd_section_is_kept_for_the_labeller(write_config: Callable[[str], str]) -> None:
    text = (
        "flags:\n  useNodeFeatureAPI: false\n  gfd:\n    oneshot: true\n    noTimestamp: true\n"
        "    sleepInterval: 1m\n    outputFile: /out\n    machineTypeFile: /mt\n"
    )
    gfd = load_config([], {}, config_file=write_config(text)).gfd
    assert (gfd.oneshot, gfd.no_timestamp, gfd.sleep_interval) == (True, True, 60.0)
    assert (gfd.output_file, gfd.machine_type_file, gfd.use_node_feature_api) == (
        "/out",
        "/mt",
        False,
    )
    infinite = load_config(
        [], {}, config_file=write_config("flags: {gfd: {sleepInterval: infinite}}")
    )
    assert infinite.gfd.sleep_interval == math.inf
    assert infinite.to_json()["gfd"]["sleep_interval"] == "infinite"  # type: ignore[index]
    nanoseconds = load_config([], {}, config_file=write_config("flags: {gfd: {sleepInterval: 5}}"))
    assert nanoseconds.gfd.sleep_interval == pytest.approx(5e-9)


def test_runtime_reload_error_is_typed(write_config: Callable[[str, str], str]) -> None:
    """A bad new file raises ConfigError, so the caller can keep the config it has."""
    good = load_config([], {}, config_file=write_config(SHARED, "good.yaml"))
    bad = write_config(SHARED.replace("replicas: 4", "replicas: 1"), "bad.yaml")
    with pytest.raises(ConfigError):
        load_config([], {}, config_file=bad)
    assert good.sharing.resources[0].replicas == 4
