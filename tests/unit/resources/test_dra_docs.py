"""docs/dra.md lists the slices of dgx-a100, a100-mig-mixed, hgx-16, a100-mig-dynamic as built."""

from __future__ import annotations

from resources.dra_slices import MAX_DEVICES
from scripts.dra_table import (
    DOCS,
    DYNAMIC,
    PROFILES,
    current,
    current_dynamic,
    dynamic_slices_of,
    render,
    render_dynamic,
    slices_of,
)
from tests.unit.kube.slice_rules import slice_problems


def test_the_docs_tables_equal_what_the_code_publishes() -> None:
    assert current(DOCS.read_text()) == render(), (
        "docs/dra.md is stale: run `.venv/bin/python scripts/dra_table.py` from the repository root"
    )


def test_the_tables_cover_the_three_profiles_the_issue_names() -> None:
    assert [profile for profile, _ in PROFILES] == ["dgx-a100", "a100-mig-mixed", "hgx-16"]
    text = current(DOCS.read_text())
    for profile, _ in PROFILES:
        assert f"### `{profile}`" in text


def test_every_device_of_every_profile_is_a_row() -> None:
    text = current(DOCS.read_text())
    for profile, strategy in PROFILES:
        for item in slices_of(profile, strategy):
            assert len(item["spec"]["devices"]) <= MAX_DEVICES
            for device in item["spec"]["devices"]:
                uuid = device["attributes"]["uuid"]["string"]
                assert f"| `{device['name']}` |" in text
                assert f"`{uuid}`" in text



def test_the_dynamic_mig_tables_equal_what_the_code_publishes() -> None:
    assert current_dynamic(DOCS.read_text()) == render_dynamic(), (
        "docs/dra.md is stale: run `.venv/bin/python scripts/dra_table.py` from the repository root"
    )


def test_the_dynamic_mig_slices_shown_are_ones_each_api_version_takes() -> None:
    text = current_dynamic(DOCS.read_text())
    if "is not in `config/nodes/` yet" in text:
        return
    for apart, release in ((True, (1, 35)), (False, (1, 34))):
        for item in dynamic_slices_of(DYNAMIC, apart=apart):
            assert slice_problems(item, release) == []
            assert f"| `{item['metadata']['name']}` |" in text
