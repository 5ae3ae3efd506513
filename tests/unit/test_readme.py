"""The README promises what the code does.

Each test takes one thing the README states and checks it against the real
artefact: the flags table against the flag table, the quick-start commands
against the Makefile, the entry points against the packaging, the profiles
against `config/nodes/`, the readiness values against the settings (and, in
tests/e2e/test_readme.py, the `/state` fields and the metrics against a running
plugin).
"""

from __future__ import annotations

import re
import tomllib

from settings import Readiness, flags_markdown_table
from tests.layers import LAYERS
from tests.readme import REPO, TEXT, first_column, section


def test_flags_table_is_current() -> None:
    assert flags_markdown_table() in TEXT


def test_quick_start_commands_are_make_targets() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, re.MULTILINE))
    mentioned = set(re.findall(r"`make ([a-z][a-z-]*)`|^make ([a-z][a-z-]*)", TEXT, re.MULTILINE))
    used = {name for pair in mentioned for name in pair if name}
    assert {"demo", "test"} <= used
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
    for command in re.findall(r"\.venv/bin/([a-z-]+)", TEXT):
        assert command in scripts or command in tools, command


def test_hand_run_section_says_which_commands_keep_running() -> None:
    running = section("Running it")
    assert "terminal 1" in running
    assert "terminal 2" in running
    assert "keep running until Ctrl-C" in running


def test_every_node_profile_is_listed() -> None:
    profiles = sorted(path.stem for path in (REPO / "config" / "nodes").glob("*.yaml"))
    found = re.search(r"profiles in `config/nodes/` \(([^)]*)\)", TEXT)
    assert found, "the profile list moved"
    assert sorted(re.findall(r"`([^`]+)`", found.group(1))) == profiles


def test_readiness_values_are_the_settings_values() -> None:
    documented = first_column(section("Readiness"))
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
    (prerequisites,) = re.findall(r"^test: (.*)$", makefile, re.MULTILINE)
    assert prerequisites.split()[-2:] == ["unit", "e2e"]
    said = " ".join(tests.split())
    assert "import contracts, `make unit` and `make e2e`" in said
