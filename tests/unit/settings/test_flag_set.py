"""The one flag mechanism: a `FlagSpec` table in, parser, environment, help and version out.

The plugin, the labeller and the MPS daemon all parse with `FlagSet`; these
tests pin the rules the reference's flag library has and the three binaries
now share, on a small table of their own and on the three real ones.
"""

from __future__ import annotations

import pytest

from labels.flags import GFD_FLAG_SET, SHARED_FIELDS
from mps.cli import DAEMON_FLAGS, MOUNT_FLAGS
from settings import ConfigError, FlagSet, GfdSettings, wants_version
from settings.flag_spec import FlagSpec, Kind
from settings.flags import FLAGS_BY_FIELD, PLUGIN_FLAGS

# fmt: off
SPECS = (
    FlagSpec("interval", ("interval", "i"), ("T_INTERVAL",), Kind.DURATION, "how often",
             default=60.0),
    FlagSpec("items", ("item",), ("T_ITEMS",), Kind.LIST, "items", default=()),
    FlagSpec("on", ("on",), ("T_ON", "T_ON_OLD"), Kind.BOOL, "switch", default=False),
    FlagSpec("count", ("count",), ("T_COUNT",), Kind.INT, "how many", default=1),
    FlagSpec("secret", (), ("T_SECRET",), Kind.STRING, "environment only", default=""),
)
# fmt: on
FLAGS = FlagSet("tool", SPECS, summary="A tool.")


def values(argv: list[str]) -> dict[str, object]:
    return {field: given.value for field, given in FLAGS.parse_command_line(argv).items()}


@pytest.mark.parametrize(
    "argv",
    [
        ["--interval", "-1s"],
        ["-interval", "-1s"],
        ["-i", "-1s"],
        ["--interval=-1s"],
    ],
)
def test_a_value_may_start_with_a_dash_and_the_error_names_the_flag(argv: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        FLAGS.parse_command_line(argv)
    assert caught.value.path in ("--interval", "--i")
    assert caught.value.problem == "negative duration '-1s'"


def test_spellings_repeats_booleans_and_their_errors() -> None:
    assert values(["--interval", "5s", "--item", "a,b", "-item=c", "--on"]) == {
        "interval": 5.0,
        "items": ["a", "b", "c"],
        "on": True,
    }
    assert values(["--on=false", "--count", "0x10"]) == {"on": False, "count": 16}
    with pytest.raises(ConfigError, match="Cannot use two forms of the same flag: interval i"):
        FLAGS.parse_command_line(["--interval=1s", "-i", "2s"])
    with pytest.raises(ConfigError, match="flag provided but not defined"):
        FLAGS.parse_command_line(["--secret", "x"])  # environment only
    with pytest.raises(ConfigError, match="unexpected argument 'stray'"):
        FLAGS.parse_command_line(["stray"])
    with pytest.raises(ConfigError) as caught:
        FLAGS.parse_command_line(["--count"])
    assert str(caught.value) == "command line: --count: expected one argument"


def test_environment_rules() -> None:
    env = {"T_ON_OLD": "", "T_COUNT": "", "T_SECRET": "", "T_ITEMS": "x,"}
    given = FLAGS.read_environment(env)
    assert {field: value.value for field, value in given.items()} == {
        "on": False,  # an empty boolean variable means false
        "secret": "",  # an empty string counts as set
        "items": ["x", ""],  # empty items are kept, as the reference keeps them
    }  # and an empty number is ignored
    assert given["on"].name == "T_ON_OLD"
    with pytest.raises(ConfigError) as caught:
        FLAGS.read_environment({"T_ON": "yes"})
    assert str(caught.value) == (
        'environment: T_ON: could not parse "yes" as bool value for flag on'
    )
    explicit = FLAGS.explicit(["--count=3"], {"T_COUNT": "2", "T_INTERVAL": "1m"})
    assert {field: value.origin for field, value in explicit.items()} == {
        "count": "command line",
        "interval": "environment",
    }


def test_help_and_version() -> None:
    text = FLAGS.help_text()
    assert text.startswith("Usage: tool [flags]\n\nA tool.")
    for line in ("--interval value, -i value", "default: 60s", "env: $T_INTERVAL"):
        assert line in text
    assert "(environment only)" in text
    assert "-v, --version" in text
    assert FLAGS.version_text("1.2.3") == "tool version 1.2.3"
    assert wants_version(["--version"])
    assert wants_version(["-v"])
    assert not wants_version(["--", "--version"])


def test_a_table_cannot_declare_a_flag_twice() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        FlagSet("bad", (*SPECS, FlagSpec("other", ("on",), (), Kind.BOOL, "")), summary="")


def test_the_binaries_share_the_plugins_specs() -> None:
    """A flag the labeller or the MPS daemon shares with the plugin is the plugin's spec."""
    for field in SHARED_FIELDS - set(GfdSettings.model_fields):
        ours, plugin = GFD_FLAG_SET.by_field[field], FLAGS_BY_FIELD[field]
        assert (ours.names, ours.kind) == (plugin.names, plugin.kind)
        assert ours.file_key == plugin.file_key
        assert set(plugin.env) <= set(ours.env)
    for field, spec in PLUGIN_FLAGS.by_field.items():
        assert DAEMON_FLAGS.by_field[field] is spec
    assert MOUNT_FLAGS.by_field["mps_container_root"] is FLAGS_BY_FIELD["mps_container_root"]


def test_a_settings_field_declares_its_flag_once() -> None:
    """The marker gives names, variables, help and file key; the field gives the rest."""
    mig = FLAGS_BY_FIELD["mig_strategy"]
    assert (mig.names, mig.env, mig.file_key) == (
        ("mig-strategy",),
        ("MIG_STRATEGY",),
        "flags.migStrategy",
    )
    assert (mig.kind, mig.default) == (Kind.STRING, "none")
    assert mig.choices == ("none", "single", "mixed")
    assert mig.path == ("flags", "mig_strategy")
    lists = FLAGS_BY_FIELD["device_list_strategy"]
    assert (lists.kind, lists.default) == (Kind.LIST, ("envvar",))
    assert FLAGS_BY_FIELD["imex_channel_ids"].kind is Kind.INT_LIST
    assert FLAGS_BY_FIELD["fail_on_init_error"].kind is Kind.BOOL
    quiet = FLAGS_BY_FIELD["health_quiet_period"]
    assert (quiet.kind, quiet.default, quiet.path) == (
        Kind.SECONDS,
        60.0,
        ("health", "quietPeriod"),
    )
    sleep = GFD_FLAG_SET.by_field["sleep_interval"]
    assert (sleep.kind, sleep.file_key) == (Kind.DURATION, "flags.gfd.sleepInterval")
