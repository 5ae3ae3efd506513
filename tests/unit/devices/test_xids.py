"""DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS: every combination the reference defines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devices.xids import (
    APPLICATION_XIDS,
    ParsedXids,
    parse_xids,
    xid_policy,
)

UINT64_MAX = (1 << 64) - 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, ParsedXids(), id="unset"),
        pytest.param("", ParsedXids(), id="empty"),
        pytest.param("all", ParsedXids(everything=True), id="all"),
        pytest.param("xids", ParsedXids(everything=True), id="xids"),
        pytest.param(" ALL ", ParsedXids(everything=True), id="case-and-space"),
        pytest.param("79,all,junk", ParsedXids(everything=True), id="all-wins-over-the-rest"),
        pytest.param("79, 48", ParsedXids(xids=frozenset({79, 48})), id="list"),
        pytest.param(",, 79 ,", ParsedXids(xids=frozenset({79})), id="empty-tokens-skipped"),
        pytest.param("007", ParsedXids(xids=frozenset({7})), id="leading-zeros"),
        pytest.param(f"{UINT64_MAX}", ParsedXids(xids=frozenset({UINT64_MAX})), id="uint64-max"),
        pytest.param(
            f"-1, 0x4f, abc, {UINT64_MAX + 1}, +5, 4 8, 79",
            ParsedXids(
                xids=frozenset({79}),
                rejected=("-1", "0x4f", "abc", str(UINT64_MAX + 1), "+5", "4 8"),
            ),
            id="rejected-tokens-reported",
        ),
        pytest.param([79, "48", "all"], ParsedXids(everything=True), id="config-list-with-all"),
        pytest.param([79, "48"], ParsedXids(xids=frozenset({79, 48})), id="config-list"),
    ],
)
def test_parse(value: str | list[str | int] | None, expected: ParsedXids) -> None:
    assert parse_xids(value) == expected


# (disable, enable) -> (all disabled?, XIDs that must be skipped, XIDs that must be reported)
COMBINATIONS = [
    pytest.param(None, None, False, APPLICATION_XIDS, {79, 48, 94, 0}, id="defaults"),
    pytest.param("all", None, True, {79, 13, 94}, set(), id="disable-all"),
    pytest.param("xids", None, True, {79, 13}, set(), id="disable-xids"),
    pytest.param("79,48", None, False, {79, 48, 13}, {94, 63}, id="disable-some"),
    pytest.param(None, "all", False, set(), {13, 31, 43, 45, 68, 109, 79}, id="enable-all"),
    pytest.param(None, "13,31", False, {43, 45, 68, 109}, {13, 31, 79}, id="enable-some-defaults"),
    pytest.param("79", "79", False, {13}, {79}, id="enable-beats-disable"),
    pytest.param("79", "all", False, set(), {79, 13}, id="enable-all-beats-list"),
    # The reference's quirk: a specific enable list does not undo disable-all.
    pytest.param("all", "79", True, {13, 94}, {79}, id="disable-all-enable-one-still-off"),
    pytest.param("all", "all", False, set(), {13, 79, 94}, id="disable-all-enable-all"),
    # Key 0 stands for "every XID", so a literal 0 disables everything too.
    pytest.param("0", None, True, {79, 94}, set(), id="zero-means-all"),
    pytest.param("junk", "more junk", False, APPLICATION_XIDS, {79}, id="junk-ignored"),
]


@pytest.mark.parametrize(("disable", "enable", "all_off", "skipped", "reported"), COMBINATIONS)
def test_combinations(
    disable: str | None,
    enable: str | None,
    all_off: bool,
    skipped: set[int],
    reported: set[int],
) -> None:
    policy = xid_policy(disable=disable, enable=enable)
    assert policy.all_disabled is all_off
    assert {x for x in skipped if not policy.is_disabled(x)} == set()
    assert {x for x in reported if policy.is_disabled(x)} == set()


def test_rejected_tokens_are_kept_for_one_warning() -> None:
    policy = xid_policy(disable="abc,79", enable="-4")
    assert policy.rejected == ("abc", "-4")
    assert policy.is_disabled(79)


@pytest.mark.parametrize(
    ("disable", "enable", "line"),
    [
        pytest.param(None, None, "13, 31, 43, 45, 68, 109", id="defaults"),
        pytest.param("all", None, "all", id="all"),
        pytest.param(None, "all", "none (all enabled)", id="enable-all"),
        pytest.param("79", "13", "31, 43, 45, 68, 79, 109", id="mixed"),
    ],
)
def test_describe(disable: str | None, enable: str | None, line: str) -> None:
    text = xid_policy(disable=disable, enable=enable).describe()
    assert text == f"Ignoring the following XIDs for health checks: {line}"


@given(
    st.frozensets(st.integers(min_value=1, max_value=UINT64_MAX), max_size=8),
    st.frozensets(st.integers(min_value=1, max_value=UINT64_MAX), max_size=8),
)
def test_enable_always_wins_over_disable(disabled: frozenset[int], enabled: frozenset[int]) -> None:
    policy = xid_policy(disable=",".join(map(str, disabled)), enable=[str(x) for x in enabled])
    assert not policy.all_disabled
    for xid in enabled:
        assert not policy.is_disabled(xid)
    for xid in (disabled | APPLICATION_XIDS) - enabled:
        assert policy.is_disabled(xid)
