"""MIG profile naming: slice counts, attribute suffixes and the memory rounding rule."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devices.errors import DiscoveryError
from devices.migprofile import (
    is_graphics_profile,
    is_profile_name,
    mig_memory_gb,
    mig_profile_name,
    profile_attributes,
    profile_slices,
)

MIB = 1 << 20


@pytest.mark.parametrize(
    ("parent_mib", "memory_mib", "gb"),
    [
        # The worked examples of the resource-manager contract (section 1.6).
        pytest.param(40960, 4864, 5, id="a100-40gb-1g"),
        pytest.param(40960, 9984, 10, id="a100-40gb-2g"),
        pytest.param(40960, 19968, 20, id="a100-40gb-3g-4g"),
        pytest.param(40960, 40192, 40, id="a100-40gb-7g"),
        pytest.param(143771, 143771 // 8, 18, id="h200-eighth-17.625"),
        pytest.param(143771, 143771 // 2, 71, id="h200-half-70.5-rounds-up"),
        pytest.param(183359, 183359 // 8, 23, id="b200-eighth-22.5-rounds-up"),
        pytest.param(95830, 95830 // 8, 12, id="h100-nvl-eighth-11.75"),
        # An exact eighth stays that eighth (no spurious rounding up).
        pytest.param(81920, 10240, 10, id="exact-eighth"),
    ],
)
def test_memory_gb(parent_mib: int, memory_mib: int, gb: int) -> None:
    assert mig_memory_gb(memory_mib, parent_mib * MIB) == gb


def test_half_gigabytes_round_away_from_zero_unlike_python_round() -> None:
    # 70.5 and 22.5 are where banker's rounding would give 70 and 22.
    assert mig_memory_gb(143771 // 2, 143771 * MIB) != round(70.5)
    assert mig_memory_gb(183359 // 8, 183359 * MIB) != round(22.5)


def test_memory_gb_needs_a_parent_size() -> None:
    with pytest.raises(ValueError, match="parent memory"):
        mig_memory_gb(4864, 0)


@pytest.mark.parametrize(
    ("gi_profile", "ci_profile", "memory_mib", "name"),
    [
        pytest.param(0, 0, 4864, "1g.5gb", id="1-slice"),
        pytest.param(7, 0, 4864, "1g.5gb+me", id="1-slice-rev1-media"),
        pytest.param(9, 0, 9984, "1g.10gb", id="1-slice-rev2"),
        pytest.param(10, 0, 4864, "1g.5gb+gfx", id="1-slice-gfx"),
        pytest.param(13, 0, 4864, "1g.5gb-me", id="1-slice-no-media"),
        pytest.param(15, 0, 4864, "1g.5gb+me.all", id="1-slice-all-media"),
        pytest.param(1, 1, 9984, "2g.10gb", id="2-slice"),
        pytest.param(8, 1, 9984, "2g.10gb+me", id="2-slice-rev1"),
        pytest.param(2, 2, 19968, "3g.20gb", id="3-slice"),
        pytest.param(2, 0, 19968, "1c.3g.20gb", id="compute-smaller-than-gpu-instance"),
        pytest.param(3, 3, 19968, "4g.20gb", id="4-slice"),
        pytest.param(4, 4, 40192, "7g.40gb", id="7-slice"),
        pytest.param(4, 8, 40192, "7g.40gb", id="7-slice-nvl-compute"),
    ],
)
def test_profile_name(gi_profile: int, ci_profile: int, memory_mib: int, name: str) -> None:
    built = mig_profile_name(
        gi_profile=gi_profile,
        ci_profile=ci_profile,
        memory_mib=memory_mib,
        parent_total_bytes=40960 * MIB,
    )
    assert built == name
    assert is_profile_name(built)


@pytest.mark.parametrize(
    ("gi_profile", "ci_profile", "message"),
    [
        pytest.param(17, 0, "invalid GPU Instance Profile ID: 17", id="3-slice-gfx-unnamed"),
        pytest.param(0, 9, "invalid Compute Instance Profile ID: 9", id="ci-out-of-range"),
    ],
)
def test_unnamed_profiles_are_errors(gi_profile: int, ci_profile: int, message: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        mig_profile_name(
            gi_profile=gi_profile,
            ci_profile=ci_profile,
            memory_mib=4864,
            parent_total_bytes=40960 * MIB,
        )
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        pytest.param("1g.5gb", True, id="plain"),
        pytest.param("1c.2g.10gb", True, id="compute-prefix"),
        pytest.param("1g.10gb+me", True, id="attribute"),
        pytest.param("1g.10gb+me,gfx", True, id="attribute-list"),
        pytest.param("1g.10gb-me", True, id="negative-attribute"),
        pytest.param("1g.10gb+me-gfx", False, id="both-signs"),
        pytest.param("1g.5", False, id="no-unit"),
        pytest.param("0g.5gb", False, id="zero-slices"),
        pytest.param("g.5gb", False, id="no-count"),
        pytest.param("1G.5GB", False, id="upper-case"),
        pytest.param("", False, id="empty"),
    ],
)
def test_profile_name_format(name: str, valid: bool) -> None:
    assert is_profile_name(name) is valid


def test_profile_slices() -> None:
    assert profile_slices("3g.20gb") == (3, 3)
    assert profile_slices("1c.3g.20gb") == (1, 3)
    assert profile_slices("1g.5gb+me") == (1, 1)
    with pytest.raises(ValueError, match="not a MIG profile name"):
        profile_slices("three")


@given(
    parent_mib=st.integers(min_value=1024, max_value=400_000),
    share=st.fractions(min_value=0, max_value=1),
)
def test_float_rounding_agrees_with_exact_arithmetic(parent_mib: int, share: Fraction) -> None:
    memory_mib = int(parent_mib * share)
    total = parent_mib * MIB
    eighths = math.ceil(Fraction(memory_mib * MIB, total) * 8)
    exact = Fraction(eighths, 8) * -(-total // (1 << 30))
    assert mig_memory_gb(memory_mib, total) == math.floor(exact + Fraction(1, 2))


@pytest.mark.parametrize(
    ("name", "attributes", "graphics"),
    [
        pytest.param("1g.24gb", (), False, id="plain"),
        pytest.param("1g.10gb+me", ("me",), False, id="media"),
        pytest.param("1g.24gb+me.all", ("me.all",), False, id="all-media"),
        pytest.param("2g.48gb-me", (), False, id="no-media-adds-nothing"),
        pytest.param("1g.24gb+gfx", ("gfx",), True, id="graphics"),
        pytest.param("1c.4g.96gb+gfx", ("gfx",), True, id="graphics-compute-profile"),
        pytest.param("1g.10gb+me,gfx", ("me", "gfx"), True, id="attribute-list"),
    ],
)
def test_profile_attributes_and_graphics(
    name: str, attributes: tuple[str, ...], graphics: bool
) -> None:
    assert profile_attributes(name) == attributes
    assert is_graphics_profile(name) is graphics


def test_a_name_that_is_not_a_profile_has_no_attributes_and_is_not_graphics() -> None:
    assert is_graphics_profile("gfx") is False
    assert is_graphics_profile("1g.24gb+gfx-me") is False
    with pytest.raises(ValueError, match=r"not a MIG profile name: '1g\.24gb\+gfx-me'"):
        profile_attributes("1g.24gb+gfx-me")
