"""Config problems: every one reported, one line each; values once accepted silently refused.

Also what a config says about itself beyond its values: the keys nobody
reads (for ``/state`` and one WARNING each) and the short form of the
effective-config log line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loguru import logger

from settings import ConfigError, load_config
from settings.announce import announce

SEVERAL = """\
version: v1
flags:
  migStrategy: bogus
  plugin:
    deviceIDStrategy: serial
sharing:
  timeSlicing:
    resources:
    - name: gpu
      replicas: 1
health:
  quietPeriod: soon
  probeIntervall: 5
"""


def test_every_problem_of_a_file_is_reported(write_config: Callable[[str], str]) -> None:
    path = write_config(SEVERAL)
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path})
    lines = caught.value.lines()
    assert lines == [
        f"{path}: sharing.timeSlicing.resources[0].replicas: "
        "number of replicas must be >= 2; found 1",
        f"{path}: health.quietPeriod: expected a number of seconds >= 0; found \"soon\"",
        f"{path}: health.probeIntervall: unknown key (known: disableHealthchecks, doubleBitEcc, "
        "enableHealthchecks, ignoredXids, otherXids, probeInterval, quietPeriod, stickyXids, "
        "transientXids)",
        f"{path}: flags.plugin.deviceIDStrategy: invalid --device-id-strategy option: serial",
        f"{path}: flags.migStrategy: unknown MIG strategy: bogus",
    ]
    assert str(caught.value) == "; ".join(lines)  # one line where only one line fits
    assert caught.value.permanent


def test_flag_problems_come_all_together(write_config: Callable[[str], str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(
            ["--device-id-strategy=serial"],
            {"MIG_STRATEGY": "bogus", "STATE_ADDRESS": "nowhere"},
        )
    assert caught.value.lines() == [
        "command line: --device-id-strategy: invalid --device-id-strategy option: serial",
        "environment: MIG_STRATEGY: unknown MIG strategy: bogus",
        'environment: STATE_ADDRESS: invalid address "nowhere": expected HOST:PORT',
    ]


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            ["--node-label", "bad label!"],
            {},
            'command line: --node-label: invalid <node-label> "bad label!": not a valid label '
            "key: the name must consist of alphanumeric characters, '-', '_' or '.', starting "
            "and ending with an alphanumeric character",
            id="node-label-name",
        ),
        pytest.param(
            [],
            {"NODE_LABEL": "Example.com/config"},
            'environment: NODE_LABEL: invalid <node-label> "Example.com/config": not a valid '
            "label key: the prefix must be a DNS subdomain: lower case alphanumeric "
            "characters, '-' or '.', starting and ending with an alphanumeric character",
            id="node-label-prefix",
        ),
        pytest.param(
            ["--node-label=" + "x" * 64],
            {},
            f'command line: --node-label: invalid <node-label> "{"x" * 64}": not a valid '
            "label key: the name must be 1 to 63 characters",
            id="node-label-too-long",
        ),
        pytest.param(
            [],
            {"DP_DISABLE_HEALTHCHECKS": "bogus"},
            'environment: DP_DISABLE_HEALTHCHECKS: invalid XID "bogus": expected all, xids or '
            "XID numbers separated by commas",
            id="disable-healthchecks",
        ),
        pytest.param(
            [],
            {"DP_ENABLE_HEALTHCHECKS": "79, -1"},
            'environment: DP_ENABLE_HEALTHCHECKS: invalid XID "-1": expected all, xids or XID '
            "numbers separated by commas",
            id="enable-healthchecks",
        ),
    ],
)
def test_values_once_accepted_silently_are_refused(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(argv, env)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("env", "label"),
    [
        ({"NODE_LABEL": "nvidia.com/device-plugin.config"}, "nvidia.com/device-plugin.config"),
        ({"NODE_LABEL": "config"}, "config"),
        ({"NODE_LABEL": "a.b-c/D_e.f"}, "a.b-c/D_e.f"),
    ],
)
def test_good_label_keys_and_xid_lists_still_load(env: dict[str, str], label: str) -> None:
    xids = {"DP_DISABLE_HEALTHCHECKS": "48, 79,", "DP_ENABLE_HEALTHCHECKS": "ALL"}
    config = load_config([], {**env, **xids})
    assert config.flags.node_label == label
    assert config.health.disable_healthchecks == "48, 79,"


def test_unknown_keys_are_listed(write_config: Callable[[str], str]) -> None:
    path = write_config("version: v1\nflags:\n  migStrategi: mixed\nsurprise: 1\n")
    config = load_config([], {"CONFIG_FILE": path})
    assert config.unknown_keys == ("flags.migStrategi", "surprise")
    assert config.to_json()["unknown_keys"] == ["flags.migStrategi", "surprise"]
    assert f"{path}: flags.migStrategi: unknown key, ignored" in config.warnings


@pytest.fixture
def logged() -> Iterator[list[tuple[str, str]]]:
    lines: list[tuple[str, str]] = []
    handle = logger.add(
        lambda m: lines.append((m.record["level"].name, m.record["message"])), level="DEBUG"
    )
    yield lines
    logger.remove(handle)


def test_announce_logs_a_short_config_and_each_warning_once(
    write_config: Callable[[str], str], logged: list[tuple[str, str]]
) -> None:
    path = write_config("version: v1\nflags:\n  migStrategi: mixed\n  migStrategy: single\n")
    config = load_config(["--mock-nvml", "dgx-a100"], {"CONFIG_FILE": path})
    announce(config, None)
    announce(load_config(["--mock-nvml", "dgx-a100"], {"CONFIG_FILE": path}), config)
    assert [level for level, _ in logged] == ["INFO", "WARNING"]  # a reload says nothing new
    summary = json.loads(logged[0][1].removeprefix("effective config "))
    assert summary == {
        "digest": config.digest,
        "config_path": path,
        "non_default": {
            "flags": {"config_file": path, "mig_strategy": "single", "mock_nvml": "dgx-a100"}
        },
    }
    assert logged[1][1] == f"{path}: flags.migStrategi: unknown key, ignored"


def test_summary_of_a_default_config_is_its_digest() -> None:
    config = load_config([], {})
    assert config.summary() == {"digest": config.digest, "config_path": None, "non_default": {}}


def test_a_file_that_cannot_be_read_is_one_problem_beside_the_flags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(["--mig-strategy=bogus"], {}, config_file=str(tmp_path / "missing.yaml"))
    assert caught.value.lines() == [
        f"{tmp_path / 'missing.yaml'}: error opening config file: No such file or directory",
        "command line: --mig-strategy: unknown MIG strategy: bogus",
    ]


def test_a_wrong_flag_in_the_file_leaves_the_others_checked(
    write_config: Callable[[str], str],
) -> None:
    # A value the file schema refuses drops that key only, not the whole
    # flags section, so the other flags' values are still checked.
    path = write_config("version: v1\nflags:\n  failOnInitError: maybe\n  migStrategy: bogus\n")
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path})
    assert caught.value.lines() == [
        f'{path}: flags.failOnInitError: expected a boolean (true or false); found "maybe"',
        f"{path}: flags.migStrategy: unknown MIG strategy: bogus",
    ]
