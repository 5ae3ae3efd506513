"""Flags, environment, config file and defaults of the labeller, and their precedence."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from labels.cli import main
from labels.flags import GFD_FLAGS, parse_arguments
from labels.options import GfdOptions, choose_config, resolve_options
from settings import ConfigError, MigStrategy, SharingStrategy

FILE = """\
version: v1
flags:
  migStrategy: single
  useNodeFeatureAPI: false
  gfd:
    oneshot: true
    noTimestamp: true
    sleepInterval: 5s
    outputFile: /file/gfd
    machineTypeFile: /file/product_name
"""


def load(
    argv: list[str], env: dict[str, str] | None = None, *, file: str | None = None, tmp: Path
) -> GfdOptions:
    arguments = list(argv)
    if file is not None:
        path = tmp / "config.yaml"
        path.write_text(file)
        arguments += ["--config-file", str(path)]
    values = parse_arguments(arguments, env or {})
    return resolve_options(values, choose_config(values, label_value=None, current=None))


def test_defaults(tmp_path: Path) -> None:
    options = load([], tmp=tmp_path)
    assert (
        options.oneshot,
        options.no_timestamp,
        options.sleep_interval,
        options.output_file,
        options.machine_type_file,
        options.machine_type_file_set,
        options.use_node_feature_api,
        options.write_node_labels,
        options.namespace,
        options.sysfs_root,
    ) == (
        False,
        False,
        60.0,
        "/etc/kubernetes/node-feature-discovery/features.d/gfd",
        "/sys/class/dmi/id/product_name",
        False,
        False,
        False,
        "default",
        "/sys",
    )
    assert options.config.flags.mig_strategy is MigStrategy.NONE
    assert options.config.flags.fail_on_init_error is True
    assert set(options.origins.values()) == {"default"}


def test_file_values_beat_defaults(tmp_path: Path) -> None:
    options = load([], file=FILE, tmp=tmp_path)
    assert (options.oneshot, options.no_timestamp, options.sleep_interval) == (True, True, 5.0)
    assert (options.output_file, options.machine_type_file) == ("/file/gfd", "/file/product_name")
    assert options.machine_type_file_set
    assert options.config.flags.mig_strategy is MigStrategy.SINGLE
    assert options.origins["sleep_interval"] == "file"


def test_environment_beats_file(tmp_path: Path) -> None:
    env = {
        "GFD_ONESHOT": "false",
        "GFD_NO_TIMESTAMP": "",  # set but empty: false
        "GFD_SLEEP_INTERVAL": "1m30s",
        "GFD_OUTPUT_FILE": "/env/gfd",
        "GFD_MACHINE_TYPE_FILE": "",
        "MIG_STRATEGY": "mixed",
    }
    options = load([], env, file=FILE, tmp=tmp_path)
    assert (options.oneshot, options.no_timestamp, options.sleep_interval) == (False, False, 90.0)
    assert (options.output_file, options.machine_type_file) == ("/env/gfd", "")
    assert options.config.flags.mig_strategy is MigStrategy.MIXED
    assert options.origins["output_file"] == "environment"


def test_command_line_beats_environment(tmp_path: Path) -> None:
    env = {"GFD_SLEEP_INTERVAL": "10s", "GFD_OUTPUT_FILE": "/env/gfd", "GFD_ONESHOT": "true"}
    argv = ["--sleep-interval=infinite", "-o", "/cli/gfd", "--oneshot=false", "--mig-strategy=none"]
    options = load(argv, {**env, "MIG_STRATEGY": "mixed"}, file=FILE, tmp=tmp_path)
    assert math.isinf(options.sleep_interval)
    assert (options.output_file, options.oneshot) == ("/cli/gfd", False)
    assert options.config.flags.mig_strategy is MigStrategy.NONE


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--output-file", "/x"], id="long"),
        pytest.param(["--output=/x"], id="alias"),
        pytest.param(["-o", "/x"], id="short"),
        pytest.param(["-output-file", "/x"], id="single-dash"),
    ],
)
def test_output_file_spellings(argv: list[str], tmp_path: Path) -> None:
    assert load(argv, tmp=tmp_path).output_file == "/x"


def test_gfd_variable_before_the_shared_one(tmp_path: Path) -> None:
    env = {"GFD_MIG_STRATEGY": "single", "MIG_STRATEGY": "mixed", "FAIL_ON_INIT_ERROR": "false"}
    options = load([], env, tmp=tmp_path)
    assert options.config.flags.mig_strategy is MigStrategy.SINGLE
    assert options.config.flags.fail_on_init_error is False


def test_bare_boolean_flag_is_true(tmp_path: Path) -> None:
    options = load(["--oneshot", "--no-timestamp", "--use-node-feature-api"], tmp=tmp_path)
    assert (options.oneshot, options.no_timestamp, options.use_node_feature_api) == (
        True,
        True,
        True,
    )


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            [],
            {"GFD_MIG_STRATEGY": "bogus"},
            "environment: GFD_MIG_STRATEGY: unknown MIG strategy: bogus",
            id="shared-flag-named-by-its-variable",
        ),
        pytest.param(
            ["--mig-strategy", "bogus"],
            {},
            "command line: --mig-strategy: unknown MIG strategy: bogus",
            id="shared-flag-on-command-line",
        ),
        pytest.param(
            [],
            {"GFD_ONESHOT": "yes"},
            'environment: GFD_ONESHOT: could not parse "yes" as bool value for flag oneshot',
            id="bad-bool-variable",
        ),
        pytest.param(
            ["--sleep-interval", "60"],
            {},
            'command line: --sleep-interval: time: missing unit in duration "60"',
            id="unitless-duration",
        ),
        pytest.param(
            ["--sleep-interval=-1s"],
            {},
            "command line: --sleep-interval: negative duration '-1s'",
            id="negative-duration",
        ),
        pytest.param(
            ["--sleep-interval", "-1s"],
            {},
            "command line: --sleep-interval: negative duration '-1s'",
            id="negative-duration-as-next-argument",
        ),
        pytest.param(
            ["--node-label", "bad label!"],
            {},
            'command line: --node-label: invalid <node-label> "bad label!": not a valid label '
            "key: the name must consist of alphanumeric characters, '-', '_' or '.', starting "
            "and ending with an alphanumeric character",
            id="shared-flag-checked-by-the-plugins-rules",
        ),
        pytest.param(
            ["--bogus"], {}, "command line: --bogus: flag provided but not defined", id="unknown"
        ),
        pytest.param(
            ["--output", "/a", "-o", "/b"],
            {},
            "command line: --output: Cannot use two forms of the same flag: output o",
            id="two-forms",
        ),
        pytest.param(
            ["--kube-api-burst", "x"],
            {},
            "command line: --kube-api-burst: invalid integer 'x'",
            id="bad-int",
        ),
    ],
)
def test_invalid_inputs_name_their_source(
    argv: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(argv, env, tmp=tmp_path)
    assert str(caught.value) == message


def test_empty_numeric_variables_are_ignored(tmp_path: Path) -> None:
    options = load([], {"GFD_SLEEP_INTERVAL": "", "KUBE_API_QPS": ""}, tmp=tmp_path)
    assert (options.sleep_interval, options.kube_api_qps) == (60.0, 5.0)


def test_infinite_from_the_file_and_nanoseconds_as_numbers(tmp_path: Path) -> None:
    infinite = load([], file=FILE.replace("5s", "infinite"), tmp=tmp_path)
    assert math.isinf(infinite.sleep_interval)
    numeric = load([], file=FILE.replace("5s", "2000000000"), tmp=tmp_path)
    assert numeric.sleep_interval == pytest.approx(2.0)


def test_mps_sharing_loads_without_an_mps_root(tmp_path: Path) -> None:
    file = (
        "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n"
    )
    options = load([], file=file, tmp=tmp_path)
    assert options.config.sharing.strategy is SharingStrategy.MPS


def test_malformed_file_is_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load([], file="version: v1\nflags: [\n", tmp=tmp_path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "config.yaml"))


def test_config_directory_selects_by_label_then_default(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "a").write_text("version: v1\nflags:\n  migStrategy: single\n")
    (configs / "b").write_text("version: v1\nflags:\n  migStrategy: mixed\n")
    values = parse_arguments(
        [], {"CONFIG_DIRECTORY": str(configs), "DEFAULT_CONFIG": "a", "CONFIG_FILE": "/ignored"}
    )
    by_default = choose_config(values, label_value=None, current=None)
    assert (by_default.path, by_default.name) == (str(configs / "a"), "a")
    by_label = choose_config(values, label_value="b", current="a")
    assert resolve_options(values, by_label).config.flags.mig_strategy is MigStrategy.MIXED
    kept = choose_config(values, label_value="nope", current="b")
    assert kept.name == "b"
    assert kept.reason == "specified config nope does not exist; keeping b"


def test_config_directory_with_nothing_usable_fails(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("version: v1\n")
    (tmp_path / "y").write_text("version: v1\n")
    values = parse_arguments([f"--config-directory={tmp_path}"], {})
    with pytest.raises(ConfigError, match="all fallbacks failed"):
        choose_config(values, label_value=None, current=None)


def test_unknown_fallback_strategy_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load([], {"FALLBACK_STRATEGIES": "named,bogus"}, tmp=tmp_path)
    assert str(caught.value) == (
        "environment: FALLBACK_STRATEGIES: unknown fallback strategy: bogus"
    )


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    for flag in GFD_FLAGS:
        assert flag.primary in text
        assert all(variable in text for variable in flag.env)
