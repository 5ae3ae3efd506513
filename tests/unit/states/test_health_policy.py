"""The policy a checked `health` section describes: defaults, classes, explicit lists.

Settings checks the section (and applies the flag and the variables that
override it, `tests/unit/settings/test_health_section.py`); the policy is built
from the typed section as it is.
"""

from __future__ import annotations

from typing import Any

import pytest

from devices.xids import xid_policy
from settings import HealthSection
from states.health_policy import ErrorClass, HealthPolicy


def policy_of(section: dict[str, Any]) -> HealthPolicy:
    return HealthPolicy.of(HealthSection.model_validate(section))


def test_no_section_means_the_documented_defaults() -> None:
    policy = policy_of({})
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
    policy = policy_of(
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
    policy = policy_of({"transientXids": [79, 94]})
    assert policy.classify_xid(79) is ErrorClass.TRANSIENT
    assert policy.classify_xid(48) is ErrorClass.STICKY  # the sticky default otherwise stays
    assert policy.sticky_xids == frozenset({48, 64, 74, 95, 119, 120})
