"""The `health` config section: defaults, overrides from flags and environment, one-line errors."""

from __future__ import annotations

from typing import Any

import pytest

from devices.xids import xid_policy
from states.health_policy import ErrorClass, HealthPolicy, HealthPolicyError


def test_no_section_means_the_documented_defaults() -> None:
    policy = HealthPolicy.from_mapping(None)
    assert policy == HealthPolicy()
    assert policy.quiet_period == 60.0
    assert policy.probe_interval == 10.0
    assert policy.double_bit_ecc is ErrorClass.STICKY
    assert policy.xids == xid_policy()


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        *[pytest.param(x, ErrorClass.IGNORED, id=f"{x}") for x in (13, 31, 43, 45, 68, 109)],
        pytest.param(94, ErrorClass.TRANSIENT, id="94"),
        *[pytest.param(x, ErrorClass.STICKY, id=f"{x}") for x in (48, 64, 74, 79, 95, 119, 120)],
        pytest.param(8, ErrorClass.TRANSIENT, id="unlisted"),
        pytest.param(63, ErrorClass.TRANSIENT, id="63"),
    ],
)
def test_default_classes(number: int, expected: ErrorClass) -> None:
    assert HealthPolicy().classify_xid(number) is expected


def test_every_key() -> None:
    policy = HealthPolicy.from_mapping(
        {
            "quietPeriod": 5,
            "probeInterval": 0.5,
            "disableHealthchecks": [92],
            "enableHealthchecks": "13",
            "ignoredXids": [63],
            "transientXids": [79],
            "stickyXids": [94],
            "otherXids": "sticky",
            "doubleBitEcc": "transient",
        }
    )
    assert policy.quiet_period == 5.0
    assert policy.probe_interval == 0.5
    assert policy.xids == xid_policy(disable="92", enable="13")
    assert policy.classify_xid(92) is ErrorClass.IGNORED
    assert policy.classify_xid(13) is ErrorClass.STICKY  # re-enabled, then "otherXids"
    assert policy.classify_xid(63) is ErrorClass.IGNORED
    assert policy.classify_xid(79) is ErrorClass.TRANSIENT
    assert policy.classify_xid(94) is ErrorClass.STICKY
    assert policy.classify_xid(48) is ErrorClass.STICKY  # via otherXids: the list replaced 48
    assert policy.double_bit_ecc is ErrorClass.TRANSIENT


def test_an_explicit_list_takes_its_xids_out_of_other_defaults() -> None:
    policy = HealthPolicy.from_mapping({"transientXids": [79, 94]})
    assert policy.classify_xid(79) is ErrorClass.TRANSIENT
    assert policy.classify_xid(48) is ErrorClass.STICKY  # the sticky default otherwise stays
    assert policy.sticky_xids == frozenset({48, 64, 74, 95, 119, 120})


def test_flags_and_environment_override_the_file() -> None:
    section = {"quietPeriod": 5, "disableHealthchecks": "79", "enableHealthchecks": "all"}
    policy = HealthPolicy.from_mapping(section, quiet_period=120.0, disable="all", enable="")
    assert policy.quiet_period == 120.0
    assert policy.xids.all_disabled
    unchanged = HealthPolicy.from_mapping(section)
    assert unchanged.quiet_period == 5.0
    assert not unchanged.xids.is_disabled(79)  # enable-all from the file


@pytest.mark.parametrize(
    ("section", "message"),
    [
        pytest.param(
            {"quiet": 5},
            "health.quiet: unknown key (known: disableHealthchecks, doubleBitEcc, "
            "enableHealthchecks, ignoredXids, otherXids, probeInterval, quietPeriod, "
            "stickyXids, transientXids)",
            id="unknown-key",
        ),
        pytest.param(
            {"quietPeriod": -1},
            "health.quietPeriod: expected a number of seconds >= 0; found -1",
            id="negative-quiet",
        ),
        pytest.param(
            {"quietPeriod": "60s"},
            "health.quietPeriod: expected a number of seconds >= 0; found '60s'",
            id="string-quiet",
        ),
        pytest.param(
            {"quietPeriod": True},
            "health.quietPeriod: expected a number of seconds >= 0; found True",
            id="bool-quiet",
        ),
        pytest.param(
            {"probeInterval": 0},
            "health.probeInterval: expected a number of seconds > 0; found 0",
            id="zero-interval",
        ),
        pytest.param(
            {"stickyXids": 79},
            "health.stickyXids: expected a list of XIDs; found 79",
            id="not-a-list",
        ),
        pytest.param(
            {"stickyXids": [79, "48"]},
            "health.stickyXids: XIDs are whole numbers >= 0; found '48'",
            id="string-xid",
        ),
        pytest.param(
            {"ignoredXids": [-3]},
            "health.ignoredXids: XIDs are whole numbers >= 0; found -3",
            id="negative-xid",
        ),
        pytest.param(
            {"transientXids": [79], "stickyXids": [48, 79]},
            "health.stickyXids: XID 79 is also in health.transientXids",
            id="overlap",
        ),
        pytest.param(
            {"otherXids": "forever"},
            "health.otherXids: expected one of ignored, transient, sticky; found 'forever'",
            id="bad-class",
        ),
        pytest.param(
            {"doubleBitEcc": ["sticky"]},
            "health.doubleBitEcc: expected one of ignored, transient, sticky; found ['sticky']",
            id="unhashable-class",
        ),
        pytest.param(
            {"disableHealthchecks": {"all": True}},
            "health.disableHealthchecks: expected 'all', 'xids', or XIDs (a list or comma "
            "string); found {'all': True}",
            id="bad-disable",
        ),
    ],
)
def test_errors_are_one_line(section: dict[str, Any], message: str) -> None:
    with pytest.raises(HealthPolicyError) as info:
        HealthPolicy.from_mapping(section)
    assert str(info.value) == message
    assert info.value.permanent


def test_bad_override_is_reported_against_the_key() -> None:
    with pytest.raises(HealthPolicyError, match=r"^health\.quietPeriod: "):
        HealthPolicy.from_mapping({}, quiet_period=float("nan"))
