"""Sanitised names, product composition and architecture families."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labels.naming import (
    architecture_family,
    full_gpu_product,
    mig_product,
    mig_profile_label_name,
    sanitise,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a space separated string", "a-space-separated-string", id="spaces"),
        pytest.param("some(thing)else", "somethingelse", id="parentheses"),
        pytest.param("some ( thing )else", "some-thing-else", id="spaced-parentheses"),
        pytest.param("NVIDIA-TITAN-X-(Pascal)", "NVIDIA-TITAN-X-Pascal", id="titan"),
        pytest.param(" input  with multiple   spaces   ", "input-with-multiple-spaces", id="runs"),
        pytest.param("some [ / thing / ]else", "some-thing-else", id="brackets-slashes"),
        pytest.param("some / thing /else", "some-thing-else", id="slashes"),
        pytest.param("some-thing.else_new", "some-thing.else_new", id="kept-punctuation"),
        pytest.param("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", id="a100"),
        pytest.param("Tesla T4", "Tesla-T4", id="t4"),
        pytest.param("a - b", "a---b", id="lone-hyphen"),
        pytest.param("x\ty", "xy", id="tab-deleted"),
        pytest.param("Standard PC (Q35 + ICH9, 2009)", "Standard-PC-Q35-ICH9-2009", id="qemu"),
        pytest.param("GeForce RTX™ 4090", "GeForce-RTX-4090", id="non-ascii"),
        pytest.param("", "", id="empty"),
    ],
)
def test_sanitise(text: str, expected: str) -> None:
    assert sanitise(text) == expected


@given(st.text())
def test_sanitised_values_use_the_label_alphabet(text: str) -> None:
    result = sanitise(text)
    assert all(c.isascii() and (c.isalnum() or c in "-_.") for c in result)
    assert " " not in result
    assert sanitise(result) == result


@pytest.mark.parametrize(
    ("major", "minor", "family"),
    [
        pytest.param(1, 3, "tesla", id="1.3"),
        pytest.param(2, 1, "fermi", id="2.1"),
        pytest.param(3, 7, "kepler", id="3.7"),
        pytest.param(4, 0, "undefined", id="4.0"),
        pytest.param(5, 2, "maxwell", id="5.2"),
        pytest.param(6, 1, "pascal", id="6.1"),
        pytest.param(7, 0, "volta", id="7.0"),
        pytest.param(7, 2, "volta", id="7.2"),
        pytest.param(7, 5, "turing", id="7.5"),
        pytest.param(8, 0, "ampere", id="8.0"),
        pytest.param(8, 6, "ampere", id="8.6"),
        pytest.param(8, 7, "ampere", id="8.7"),
        pytest.param(8, 9, "ada-lovelace", id="8.9"),
        pytest.param(9, 0, "hopper", id="9.0"),
        pytest.param(10, 0, "blackwell", id="10.0"),
        pytest.param(11, 0, "undefined", id="11.0"),
        pytest.param(12, 0, "blackwell", id="12.0"),
        pytest.param(13, 0, "rubin", id="13.0"),
        pytest.param(14, 0, "undefined", id="14.0"),
        pytest.param(-1, -1, "undefined", id="negative"),
    ],
)
def test_architecture_family(major: int, minor: int, family: str) -> None:
    assert architecture_family(major, minor) == family


@pytest.mark.parametrize(
    ("parent", "profile", "shared", "expected"),
    [
        pytest.param(
            "NVIDIA A100-SXM4-40GB", "1g.5gb", False, "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", id="plain"
        ),
        pytest.param(
            "A100-SXM4-40GB", "1g.5gb", True, "A100-SXM4-40GB-MIG-1g.5gb-SHARED", id="shared"
        ),
        pytest.param("MOCKMODEL", "3g.20gb", False, "MOCKMODEL-MIG-3g.20gb", id="mock"),
        pytest.param("H100", "1g.10gb+me", False, "H100-MIG-1g.10gb.me", id="plus-becomes-dot"),
        pytest.param("H100", "1g.10gb-me", False, "H100-MIG-1g.10gb-me", id="minus-kept"),
        pytest.param("H100", "1c.3g.40gb", False, "H100-MIG-1c.3g.40gb", id="compute-slices"),
    ],
)
def test_mig_product(parent: str, profile: str, shared: bool, expected: str) -> None:
    assert mig_product(parent, profile, shared=shared) == expected


def test_full_gpu_product() -> None:
    assert full_gpu_product("Tesla T4", shared=False) == "Tesla-T4"
    assert full_gpu_product("Tesla T4", shared=True) == "Tesla-T4-SHARED"
    # A name that sanitises to nothing leaves no dangling separator.
    assert full_gpu_product("(?)", shared=True) == "SHARED"


def test_mig_profile_label_name() -> None:
    assert mig_profile_label_name("1g.5gb+me.all") == "1g.5gb.me.all"
    assert mig_profile_label_name("2g.20gb+gfx") == "2g.20gb.gfx"
    assert mig_profile_label_name("1g.10gb-me") == "1g.10gb-me"
