"""docs/labels.md documents every label (with an example value) and every flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labels import keys
from labels.flags import GFD_FLAGS, FlagSpec

DOC = (Path(__file__).resolve().parents[3] / "docs" / "labels.md").read_text()
# A catalog row: | `key` | `example` | ...
ROWS = dict(re.findall(r"^\| `(nvidia\.com/[^`]+)` \| `([^`]*)` \|", DOC, flags=re.MULTILINE))


@pytest.mark.parametrize("key", [pytest.param(key, id=key) for key in keys.NODE_KEYS])
def test_every_node_label_has_a_row_with_an_example(key: str) -> None:
    assert key in ROWS
    assert ROWS[key]


@pytest.mark.parametrize(
    "suffix", [pytest.param(suffix, id=suffix) for suffix in keys.RESOURCE_SUFFIXES]
)
def test_every_resource_label_has_a_row_with_an_example(suffix: str) -> None:
    rows = [key for key in ROWS if key.endswith(f".{suffix}") and ROWS[key] != ""]
    assert any(
        key == f"nvidia.com/gpu.{suffix}" or key.startswith("nvidia.com/mig-") for key in rows
    )


@pytest.mark.parametrize("flag", [pytest.param(flag, id=flag.field) for flag in GFD_FLAGS])
def test_every_flag_is_documented(flag: FlagSpec) -> None:
    row = next((line for line in DOC.splitlines() if line.startswith(f"| `{flag.primary}`")), None)
    assert row is not None
    for variable in flag.env:
        assert f"`{variable}`" in row
