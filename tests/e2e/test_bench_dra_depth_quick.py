"""`python -m bench --quick --only dra_depth` writes its rows, with numbers in them.

As `test_bench_quick.py` checks the other groups: the figures depend on the
machine and are not judged; the rows, their units and that each holds real
samples are. The quick form is two plugin starts and a handful of calls.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPTH_ROWS = (
    "dra.mig_prepare",
    "dra.mig_unprepare",
    "dra.health_xid_to_unhealthy",
    "dra.health_reset_to_healthy",
)


def test_quick_dra_depth_group_measures_mig_prepares_and_health_messages(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "dra_depth", "--output", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(output.read_text())
    assert document["mode"] == "quick"
    assert document["groups"]["dra_depth"]["skipped"] is None
    rows = {row["name"]: row for row in document["rows"]}
    assert set(rows) == set(DEPTH_ROWS)
    for name in DEPTH_ROWS:
        row = rows[name]
        assert row["unit"] == "ms"
        assert row["count"] > 0
        for stat in ("median", "p99"):
            assert isinstance(row[stat], float), row
            assert math.isfinite(row[stat]), row
        assert 0 < row["median"] <= row["p99"], row
    details = document["groups"]["dra_depth"]["details"]
    # Every claim of a round held its own MIG instance at once.
    assert details["mig_most_instances"] == rows["dra.mig_prepare"]["count"]
    assert all(name in done.stdout for name in DEPTH_ROWS)
