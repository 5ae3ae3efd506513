"""`python -m bench --quick` runs and writes the rows it promises, with numbers in them.

The figures themselves depend on the machine and are not judged here; what
is checked is the contract the issue notes rely on: one printed table, and a
JSON file with a row per figure whose median and p99 are real numbers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHEAP = "rpc,restart"
EXPECTED = {
    "allocate.plugin": "ms",
    "allocate.floor": "ms",
    "allocate.ratio": "x",
    "preferred.plugin": "ms",
    "preferred.floor": "ms",
    "preferred.ratio": "x",
    "kubelet_restart": "ms",
}


def test_quick_run_writes_every_row(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", CHEAP, "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(output.read_text())
    assert document["mode"] == "quick"
    rows = {row["name"]: row for row in document["rows"]}
    assert set(rows) == set(EXPECTED)
    for name, unit in EXPECTED.items():
        row = rows[name]
        assert row["unit"] == unit
        assert row["count"] > 0
        for stat in ("median", "p99"):
            value = row[stat]
            assert isinstance(value, float), (name, stat, value)
            assert math.isfinite(value), (name, stat, value)
            assert value > 0, (name, stat, value)
        assert row["median"] <= row["p99"] or unit == "x", row
    assert rows["allocate.ratio"]["goal"]["stat"] == "median"
    assert isinstance(rows["allocate.ratio"]["goal"]["met"], bool)
    # The one table names every row.
    table = done.stdout
    assert all(name in table for name in EXPECTED)
    assert str(output) in table


def test_unknown_group_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "nope"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown group(s) nope" in done.stderr


DRA_ROWS = {
    "dra.flip_first": True,
    "dra.flip_to_dra": True,
    "dra.flip_to_device_plugin": True,
    "dra.prepare_1gpu": True,
    "dra.prepare_8gpu": True,
    "dra.prepare_again_8gpu": False,
    "dra.unprepare_8gpu": False,
    "dra.restart_to_reprepare": False,
    "dra.reprepare_after_restart": False,
}  # row -> judged against a goal


def test_quick_dra_group_measures_flips_claims_and_a_restart(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "dra", "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(output.read_text())
    assert document["groups"]["dra"]["skipped"] is None
    rows = {row["name"]: row for row in document["rows"]}
    assert set(rows) == set(DRA_ROWS)
    for name, judged in DRA_ROWS.items():
        row = rows[name]
        assert row["unit"] == "ms"
        assert row["count"] > 0
        assert 0 < row["median"] <= row["p99"], row
        assert math.isfinite(row["p99"]), row
        assert (row["goal"] is not None) is judged, row
        if judged:
            assert isinstance(row["goal"]["met"], bool), row
    details = document["groups"]["dra"]["details"]
    assert len(details["flip_parts_ms"]["to_dra_slices"]) == rows["dra.flip_to_dra"]["count"] + 1
    assert all(name in done.stdout for name in DRA_ROWS)
