"""The ``health`` section: checked once, when the config loads, flags and variables on top.

A section the loader accepts is one the health machine can use as it is; a
section it refuses is one line per problem, naming the key. Three keys are
also flags or variables, and win over the file like every flag.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from settings import ConfigError, ErrorClass, load_config
from states.health_policy import HealthPolicy

KNOWN = (
    "disableHealthchecks, doubleBitEcc, enableHealthchecks, ignoredXids, otherXids, "
    "probeInterval, quietPeriod, stickyXids, transientXids"
)


def config_text(section: dict[str, Any]) -> str:
    # JSON is YAML: each value reaches the loader with exactly this type.
    return json.dumps({"version": "v1", "health": section})


@pytest.mark.parametrize(
    "section",
    [
        {},
        {"quietPeriod": 30, "probeInterval": 5},
        {"stickyXids": [48], "transientXids": [94]},
        {"otherXids": "sticky"},
        {"disableHealthchecks": "all"},
        {"disableHealthchecks": [48, "79"]},
        {"enableHealthchecks": None},
        {"quietPeriod": None},
    ],
    ids=str,
)
def test_an_accepted_section_builds_its_policy(
    section: dict[str, Any], write_config: Callable[[str], str]
) -> None:
    config = load_config([], {}, config_file=write_config(config_text(section)))
    policy = HealthPolicy.of(config.health)
    assert policy.quiet_period == (section.get("quietPeriod") or 60.0)
    assert policy.probe_interval == section.get("probeInterval", 10.0)


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"quietPeriod": "soon"},
         'health.quietPeriod: expected a number of seconds >= 0; found "soon"'),
        ({"quietPeriod": -1}, "health.quietPeriod: expected a number of seconds >= 0; found -1"),
        ({"quietPeriod": True},
         "health.quietPeriod: expected a number of seconds >= 0; found true"),
        ({"probeInterval": 0}, "health.probeInterval: expected a number of seconds > 0; found 0"),
        ({"stickyXids": 79}, "health.stickyXids: expected a list of XIDs; found 79"),
        ({"stickyXids": [79, "48"]}, 'health.stickyXids: XIDs are whole numbers >= 0; found "48"'),
        ({"ignoredXids": [-1]}, "health.ignoredXids: XIDs are whole numbers >= 0; found -1"),
        ({"stickyXids": [48, 79], "ignoredXids": [79]},
         "health: stickyXids: XID 79 is also in health.ignoredXids"),
        ({"otherXids": "forever"},
         'health.otherXids: expected one of ignored, transient, sticky; found "forever"'),
        ({"doubleBitEcc": ["sticky"]},
         'health.doubleBitEcc: expected one of ignored, transient, sticky; found ["sticky"]'),
        ({"disableHealthchecks": {"a": 1}},
         "health.disableHealthchecks: expected 'all', 'xids', or XIDs (a list or comma "
         'string); found {"a": 1}'),
        ({"enableHealthchecks": "79, x"},
         'health.enableHealthchecks: invalid XID "x": expected all, xids or XID numbers '
         "separated by commas"),
        ({"quietperiod": 5}, f"health.quietperiod: unknown key (known: {KNOWN})"),
    ],
    ids=str,
)  # fmt: skip
def test_a_refused_section_is_one_line_naming_the_key(
    section: dict[str, Any], problem: str, write_config: Callable[[str], str]
) -> None:
    path = write_config(config_text(section))
    with pytest.raises(ConfigError) as caught:
        load_config([], {}, config_file=path)
    assert caught.value.lines() == [f"{path}: {problem}"]


def test_the_section_is_typed(write_config: Callable[[str], str]) -> None:
    section = {"ignoredXids": [92, 63, 92], "disableHealthchecks": [48, "79"]}
    text = config_text({**section, "doubleBitEcc": "transient"})
    health = load_config([], {}, config_file=write_config(text)).health
    assert health.ignored_xids == (63, 92)
    assert health.transient_xids is None  # not given: the health machine's default applies
    assert health.disable_healthchecks == "48,79"
    assert health.double_bit_ecc is ErrorClass.TRANSIENT
    assert health.probe_interval == 10.0


def test_the_flag_and_the_variables_win_over_the_file(write_config: Callable[[str], str]) -> None:
    path = write_config(
        config_text({"quietPeriod": 5, "disableHealthchecks": "79", "enableHealthchecks": "all"})
    )
    from_file = load_config([], {"CONFIG_FILE": path})
    assert (from_file.health.quiet_period, from_file.sources["health_quiet_period"]) == (5, "file")
    overridden = load_config(
        ["--health-quiet-period=120"],
        {"CONFIG_FILE": path, "DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": ""},
    )
    assert overridden.health.quiet_period == 120.0
    assert overridden.sources["health_quiet_period"] == "flag"
    assert overridden.sources["disable_healthchecks"] == "env"
    assert HealthPolicy.of(overridden.health).xids.all_disabled
    assert not HealthPolicy.of(from_file.health).xids.is_disabled(79)  # enable-all from the file


def test_a_bad_variable_is_reported_against_the_variable(
    write_config: Callable[[str], str],
) -> None:
    path = write_config(config_text({"disableHealthchecks": "79"}))
    with pytest.raises(ConfigError) as caught:
        load_config([], {"CONFIG_FILE": path, "DP_DISABLE_HEALTHCHECKS": "79,-1"})
    assert str(caught.value) == (
        'environment: DP_DISABLE_HEALTHCHECKS: invalid XID "-1": expected all, xids or XID '
        "numbers separated by commas"
    )
