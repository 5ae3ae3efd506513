"""Command line > environment > config file > default, for every flag.

Each row gives one flag a distinct value per source; every combination of
sources is loaded and the highest one present must win, both in the value
and in the reported origin. A last test keeps the table complete.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from settings import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    DiscoveryStrategy,
    EffectiveConfig,
    FallbackStrategy,
    KubeletApi,
    LogFormat,
    MigStrategy,
    Readiness,
    load_config,
)
from settings.flag_spec import FlagSpec
from settings.flags import FLAGS, FLAGS_BY_FIELD


@dataclass(frozen=True)
class Row:
    field: str
    file: Any  # value written into the YAML file (None: the flag has no file key)
    env: str
    flag: str | None  # None: set through the environment only
    want_file: Any
    want_env: Any
    want_flag: Any


DLS = DeviceListStrategy
ROWS = [
    Row("mig_strategy", "single", "mixed", "none",
        MigStrategy.SINGLE, MigStrategy.MIXED, MigStrategy.NONE),
    Row("fail_on_init_error", False, "1", "false", False, True, False),
    Row("driver_root", "/file", "/env", "/flag", "/file", "/env", "/flag"),
    Row("dev_root", "/dfile", "/denv", "/dflag", "/dfile", "/denv", "/dflag"),
    Row("pass_device_specs", True, "0", "true", True, False, True),
    Row("device_list_strategy", ["volume-mounts", "cdi-cri"], "cdi-annotations,envvar", "cdi-cri",
        (DLS.VOLUME_MOUNTS, DLS.CDI_CRI), (DLS.ENVVAR, DLS.CDI_ANNOTATIONS), (DLS.CDI_CRI,)),
    Row("device_id_strategy", "index", "uuid", "index",
        DeviceIdStrategy.INDEX, DeviceIdStrategy.UUID, DeviceIdStrategy.INDEX),
    Row("gdrcopy_enabled", True, "F", "t", True, False, True),
    Row("gds_enabled", True, "FALSE", "T", True, False, True),
    Row("mofed_enabled", True, "f", "True", True, False, True),
    Row("cdi_annotation_prefix", "file.io/", "env.io/", "flag.io/",
        "file.io/", "env.io/", "flag.io/"),
    Row("nvidia_cdi_hook_path", "/f/hook", "/e/hook", "/c/hook", "/f/hook", "/e/hook", "/c/hook"),
    Row("driver_root_ctr_path", "/f/drv", "/e/drv", "/c/drv", "/f/drv", "/e/drv", "/c/drv"),
    Row("mps_root", "/f/mps", "/e/mps", "/c/mps", "/f/mps", "/e/mps", "/c/mps"),
    Row("shared_devices_allocation_policy", "packed", "distributed", "packed",
        AllocationPolicy.PACKED, AllocationPolicy.DISTRIBUTED, AllocationPolicy.PACKED),
    Row("device_discovery_strategy", "nvml", "tegra", "auto",
        DiscoveryStrategy.NVML, DiscoveryStrategy.TEGRA, DiscoveryStrategy.AUTO),
    Row("imex_channel_ids", [0], "0", "0x0", (0,), (0,), (0,)),
    Row("imex_required", True, "false", "true", True, False, True),
    Row("kubelet_socket", None, "/e.sock", "/c.sock", None, "/e.sock", "/c.sock"),
    Row("cdi_feature_flags", None, "a,b", "c", None, ("a", "b"), ("c",)),
    Row("cdi_disable_hooks", None, "all", "x,y", None, ("all",), ("x", "y")),
    Row("include_devices", [0, "0000:07:00.0"], "1,GPU-A0BBA3C3-C007-582D-8278-AEFA736DE776",
        "00000000:0F:00.0", ("0", "0000:07:00.0"),
        ("1", "GPU-a0bba3c3-c007-582d-8278-aefa736de776"), ("0000:0f:00.0",)),
    Row("exclude_devices", "3, 4", "5", "6,7", ("3", "4"), ("5",), ("6", "7")),
    Row("mock_nvml", None, "a100", "h100", None, "a100", "h100"),
    Row("mock_nvml_events", None, "/e/ev", "/c/ev", None, "/e/ev", "/c/ev"),
    Row("state_address", None, "0.0.0.0:1", "[::1]:2", None, "0.0.0.0:1", "[::1]:2"),
    Row("probe_address", None, "0.0.0.0:3", "[::1]:4", None, "0.0.0.0:3", "[::1]:4"),
    Row("log_format", None, "json", "text", None, LogFormat.JSON, LogFormat.TEXT),
    Row("node_name", None, "node-e", "node-c", None, "node-e", "node-c"),
    Row("config_directory", None, "/e/cfg", "/c/cfg", None, "/e/cfg", "/c/cfg"),
    Row("default_config", None, "dflt-e", "dflt-c", None, "dflt-e", "dflt-c"),
    Row("node_label", None, "e/label", "c/label", None, "e/label", "c/label"),
    Row("fallback_strategies", None, "empty", "single,named", None,
        (FallbackStrategy.EMPTY,), (FallbackStrategy.SINGLE, FallbackStrategy.NAMED)),
    Row("cdi_spec_dir", None, "/e/cdi", "/c/cdi", None, "/e/cdi", "/c/cdi"),
    Row("health_quiet_period", 30, "5", "0.5", 30.0, 5.0, 0.5),
    Row("mps_container_root", None, "/e/mps", "/c/mps", None, "/e/mps", "/c/mps"),
    Row("events", None, "false", "true", None, False, True),
    Row("readiness", None, "running", "serving", None, Readiness.RUNNING, Readiness.SERVING),
    Row("kubelet_api", "dra", "device-plugin", "dra",
        KubeletApi.DRA, KubeletApi.DEVICE_PLUGIN, KubeletApi.DRA),
    Row("dra_driver_name", None, "gpu.example.com", "gpu.example.org",
        None, "gpu.example.com", "gpu.example.org"),
    Row("kubelet_registrar_directory_path", None, "/e/reg", "/f/reg", None, "/e/reg", "/f/reg"),
    Row("kubelet_plugins_directory_path", None, "/e/plug", "/f/plug", None, "/e/plug", "/f/plug"),
    Row("dra_dynamic_mig", True, "false", "true", True, False, True),
    Row("disable_healthchecks", [13, "68"], "48, 79", None, "13,68", "48, 79", None),
    Row("enable_healthchecks", "xids", "all", None, "xids", "all", None),
]  # fmt: skip

SOURCES = ("file", "env", "flag")


def value_of(config: EffectiveConfig, spec: FlagSpec) -> Any:
    """The flag's value, wherever in the config it lives (``flags``, ``health``)."""
    section, key = spec.path
    model = getattr(config, section)
    name = next(n for n, info in type(model).model_fields.items() if (info.alias or n) == key)
    return getattr(model, name)


def _nested(key_path: str, value: Any) -> dict[str, Any]:
    *parents, last = key_path.split(".")
    node: dict[str, Any] = {last: value}
    for key in reversed(parents):
        node = {key: node}
    return node


def _cases() -> list[Any]:
    cases = []
    for row in ROWS:
        usable = [
            s
            for s in SOURCES
            if (s != "file" or row.file is not None) and (s != "flag" or row.flag is not None)
        ]
        for size in range(len(usable) + 1):
            for combo in itertools.combinations(usable, size):
                name = "+".join(combo) or "none"
                cases.append(pytest.param(row, frozenset(combo), id=f"{row.field}-{name}"))
    return cases


@pytest.mark.parametrize(("row", "present"), _cases())
def test_highest_source_wins(
    row: Row, present: frozenset[str], write_config: Callable[[str], str]
) -> None:
    spec = FLAGS_BY_FIELD[row.field]
    env: dict[str, str] = {}
    argv: list[str] = []
    if "file" in present:
        assert spec.file_key is not None
        document = {"version": "v1", **_nested(spec.file_key, row.file)}
        env["CONFIG_FILE"] = write_config(yaml.safe_dump(document))
    if "env" in present:
        env[spec.env[0]] = row.env
    if "flag" in present:
        argv.append(f"{spec.primary}={row.flag}")

    config = load_config(argv, env)

    value = value_of(config, spec)
    if "flag" in present:
        assert (value, config.sources[row.field]) == (row.want_flag, "flag")
    elif "env" in present:
        assert (value, config.sources[row.field]) == (row.want_env, "env")
    elif "file" in present:
        assert (value, config.sources[row.field]) == (row.want_file, "file")
    else:
        assert value == value_of(load_config([], {}), spec)
        expected_origin = "default"
        assert config.sources[row.field] == expected_origin


def test_table_covers_every_flag() -> None:
    covered = {row.field for row in ROWS} | {"config_file"}  # config_file: tests below
    assert covered == {spec.field for spec in FLAGS}
    for row in ROWS:
        assert (row.file is None) == (FLAGS_BY_FIELD[row.field].file_key is None), row.field


def test_config_file_flag_beats_environment(write_config: Callable[[str, str], str]) -> None:
    from_env = write_config("flags: {migStrategy: single}", "env.yaml")
    from_flag = write_config("flags: {migStrategy: mixed}", "flag.yaml")
    config = load_config([f"--config-file={from_flag}"], {"CONFIG_FILE": from_env})
    assert config.flags.mig_strategy is MigStrategy.MIXED
    assert config.flags.config_file == from_flag
    assert config.sources["config_file"] == "flag"
    assert config.config_path == from_flag


def test_config_file_from_environment(write_config: Callable[[str, str], str]) -> None:
    path = write_config("flags: {migStrategy: single}", "env.yaml")
    config = load_config([], {"CONFIG_FILE": path})
    assert config.flags.mig_strategy is MigStrategy.SINGLE
    assert config.sources["config_file"] == "env"


def test_explicit_file_replaces_the_flag(write_config: Callable[[str, str], str]) -> None:
    named = write_config("flags: {migStrategy: single}", "named.yaml")
    chosen = write_config("flags: {migStrategy: mixed}", "chosen.yaml")
    config = load_config([f"--config-file={named}"], {}, config_file=chosen)
    assert config.flags.mig_strategy is MigStrategy.MIXED
    assert config.config_path == chosen
    no_file = load_config([f"--config-file={named}"], {}, config_file="")
    assert no_file.flags.mig_strategy is MigStrategy.NONE
    assert no_file.config_path is None


# The reference's quirks that deployed manifests rely on.


@pytest.mark.parametrize("variable", ["FAIL_ON_INIT_ERROR", "PASS_DEVICE_SPECS", "IMEX_REQUIRED"])
def test_empty_boolean_variable_means_false(
    variable: str, write_config: Callable[[str], str]
) -> None:
    spec = next(spec for spec in FLAGS if variable in spec.env)
    assert spec.file_key is not None
    path = write_config(yaml.safe_dump(_nested(spec.file_key, True)))
    config = load_config([], {"CONFIG_FILE": path, variable: ""})
    assert getattr(config.flags, spec.field) is False
    assert config.sources[spec.field] == "env"


def test_empty_string_variable_counts_as_set(write_config: Callable[[str], str]) -> None:
    path = write_config("flags: {mpsRoot: /run/mps}")
    config = load_config([], {"CONFIG_FILE": path, "MPS_ROOT": ""})
    assert config.flags.mps_root == ""
    assert config.sources["mps_root"] == "env"


def test_empty_integer_list_variable_is_ignored(write_config: Callable[[str], str]) -> None:
    path = write_config("imex: {channelIDs: [0]}")
    config = load_config([], {"CONFIG_FILE": path, "IMEX_CHANNEL_IDS": ""})
    assert config.flags.imex_channel_ids == (0,)
    assert config.sources["imex_channel_ids"] == "file"


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        pytest.param(["--device-list-strategy=envvar,cdi-cri"], {}, id="command-line"),
        pytest.param(["--device-list-strategy", "envvar, cdi-cri"], {}, id="command-line-spaced"),
        pytest.param([], {"DEVICE_LIST_STRATEGY": "envvar,cdi-cri"}, id="environment"),
        pytest.param(
            ["--device-list-strategy=envvar", "--device-list-strategy=cdi-cri"], {}, id="repeated"
        ),
    ],
)
def test_commas_split_on_command_line_and_environment(argv: list[str], env: dict[str, str]) -> None:
    config = load_config(argv, env)
    assert config.flags.device_list_strategy == (DLS.ENVVAR, DLS.CDI_CRI)


def test_commas_do_not_split_in_the_file(write_config: Callable[[str], str]) -> None:
    from settings import ConfigError

    path = write_config('flags: {plugin: {deviceListStrategy: "envvar,cdi-cri"}}')
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path})
    assert str(caught.value) == (
        f"{path}: flags.plugin.deviceListStrategy: "
        "invalid --device-list-strategy option: invalid strategy: envvar,cdi-cri"
    )


def test_command_line_list_replaces_environment_list() -> None:
    config = load_config(
        ["--device-list-strategy=cdi-cri"], {"DEVICE_LIST_STRATEGY": "envvar,volume-mounts"}
    )
    assert config.flags.device_list_strategy == (DLS.CDI_CRI,)


def test_first_listed_variable_wins() -> None:
    both = load_config([], {"NVIDIA_CDI_HOOK_PATH": "/first", "NVIDIA_CTK_PATH": "/second"})
    assert both.flags.nvidia_cdi_hook_path == "/first"
    second = load_config([], {"NVIDIA_CTK_PATH": "/second", "CONTAINER_DRIVER_ROOT": "/ctr"})
    assert second.flags.nvidia_cdi_hook_path == "/second"
    assert second.flags.driver_root_ctr_path == "/ctr"


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--nvidia-driver-root=/run/nvidia/driver"], "driver_root", "/run/nvidia/driver"),
        (["--nvidia-dev-root", "/dev-root"], "dev_root", "/dev-root"),
        (["--nvidia-ctk-path=/usr/local/bin/nvidia-ctk"], "nvidia_cdi_hook_path",
         "/usr/local/bin/nvidia-ctk"),
        (["--container-driver-root=/drv"], "driver_root_ctr_path", "/drv"),
        (["-mig-strategy=mixed"], "mig_strategy", MigStrategy.MIXED),
        (["-mig-strategy", "single"], "mig_strategy", MigStrategy.SINGLE),
        (["--pass-device-specs"], "pass_device_specs", True),
        (["--fail-on-init-error=false"], "fail_on_init_error", False),
        (["--mig-strategy=single", "--mig-strategy=mixed"], "mig_strategy", MigStrategy.MIXED),
    ],
)  # fmt: skip
def test_command_line_spellings(argv: list[str], field: str, value: Any) -> None:
    assert getattr(load_config(argv, {}).flags, field) == value


def test_empty_device_root_follows_driver_root(write_config: Callable[[str], str]) -> None:
    path = write_config('flags: {nvidiaDriverRoot: /run/nvidia/driver, nvidiaDevRoot: ""}')
    config = load_config([], {"CONFIG_FILE": path})
    assert config.flags.dev_root == "/run/nvidia/driver"
    assert config.sources["dev_root"] == "file"
    from_flag = load_config(["--driver-root=/drv"], {})
    assert (from_flag.flags.dev_root, from_flag.sources["dev_root"]) == ("/drv", "flag")
