"""The README and the docs pages promise what the code does.

Each test takes one thing the documentation states and checks it against the
real artefact: the flags table (docs/configuration.md) against the flag table,
the quick-start commands against the Makefile, the entry points against the
packaging, the profiles (docs/running.md) against `config/nodes/`, the
readiness values (docs/inspection.md) against the settings (and, in
tests/e2e/test_readme.py, the `/state` fields and the metrics of
docs/inspection.md against a running plugin). The README itself stays a front
door: short, in a fixed order, with every docs page in its index and no link
that leads nowhere.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from settings import Readiness, flags_markdown_table
from tests.layers import LAYERS
from tests.readme import REPO, TEXT, anchors, first_column, links, pages, section, text


def test_flags_table_is_current() -> None:
    assert flags_markdown_table() in text("docs/configuration.md")


def _all_text() -> str:
    return "\n".join([TEXT, *(page.read_text(encoding="utf-8") for page in pages())])


def test_quick_start_commands_are_make_targets() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    pattern = r"`make ([a-z][a-z-]*)`|^make ([a-z][a-z-]*)"
    quick = set(re.findall(pattern, section("Quick start"), re.MULTILINE))
    assert {"demo", "test"} <= {name for pair in quick for name in pair if name}
    # Every `make X` the README or a docs page names is a target.
    mentioned = set(re.findall(pattern, _all_text(), re.MULTILINE))
    used = {name for pair in mentioned for name in pair if name}
    assert used <= targets, used - targets
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_entry_points_are_the_packaged_scripts() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    scripts = project["scripts"]
    table = section("Quick start")
    listed = [name for name in first_column(table) if not name.startswith("make")]
    assert sorted(listed) == sorted(scripts)
    # Or a development tool that `make test` installs (the test runner).
    tools = {re.split(r"[<>=\[ ]", spec)[0] for spec in project["optional-dependencies"]["dev"]}
    # The environment's own interpreter and installer are in every venv.
    for command in re.findall(r"\.venv/bin/([a-z-]+)", _all_text()):
        assert command in scripts or command in tools or command in ("python", "pip"), command


def test_hand_run_section_says_which_commands_keep_running() -> None:
    running = section("Running it", page="docs/running.md")
    assert "terminal 1" in running
    assert "terminal 2" in running
    assert "keep running until Ctrl-C" in running


def test_every_node_profile_is_listed() -> None:
    profiles = sorted(path.stem for path in (REPO / "config" / "nodes").glob("*.yaml"))
    found = re.search(r"profiles in `config/nodes/` \(([^)]*)\)", text("docs/running.md"))
    assert found, "the profile list moved"
    assert sorted(re.findall(r"`([^`]+)`", found.group(1))) == profiles


def test_readiness_values_are_the_settings_values() -> None:
    documented = first_column(section("Readiness", page="docs/inspection.md"))
    assert sorted(documented) == sorted(str(value) for value in Readiness)


def test_the_test_layers_are_the_marked_ones_with_their_make_targets() -> None:
    tests = section("Tests")
    rows = [line.split("|")[1:-1] for line in tests.splitlines() if line.startswith("| `")]
    assert [row[0].strip().strip("`") for row in rows] == list(LAYERS)
    assert [row[3].strip() for row in rows] == [f"`make {layer}`" for layer in LAYERS]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^PYTEST := .*/pytest$", makefile, re.MULTILINE)
    for layer in LAYERS:
        recipe = rf"^{layer}: .*\n\t\$\(PYTEST\) .*-m .*{layer}"
        assert re.search(recipe, makefile, re.MULTILINE), layer
    (recipe,) = re.findall(r"^test: .*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    goals = [word for line in recipe.splitlines() for word in line.split() if word in LAYERS]
    assert goals == ["unit", "e2e"]  # the long suites are left out
    said = " ".join(tests.split())
    assert "import contracts, `make unit` and `make e2e`" in said


def test_the_readme_is_a_front_door() -> None:
    assert len(TEXT.splitlines()) <= 300
    # What it is comes first, under the title; then these, in this order.
    sections = re.findall(r"^## (.*)$", TEXT, re.MULTILINE)
    assert sections == ["Quick start", "Architecture", "Layout", "Tests", "Documentation"]


def test_every_docs_page_is_in_the_readme_index() -> None:
    index = section("Documentation")
    linked = {target.split("#")[0] for target in re.findall(r"\]\(([^)]+)\)", index)}
    listed = {f"docs/{page.name}" for page in pages()}
    assert listed - linked == set(), "docs pages missing from the README's index"
    # One row per page, each saying what the page holds.
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    assert len(rows) == len(listed)
    assert all(len(row.split("|")[2].strip()) > 20 for row in rows)


@pytest.mark.parametrize(
    "doc", [pytest.param(path, id=path.name) for path in [REPO / "README.md", *pages()]]
)
def test_every_relative_link_leads_somewhere(doc: Path) -> None:
    broken = []
    for target in links(doc):
        path, _, anchor = target.partition("#")
        goal = (doc.parent / path).resolve() if path else doc
        if not goal.exists() or (anchor and goal.suffix == ".md" and anchor not in anchors(goal)):
            broken.append(target)
    assert broken == []
