"""The JSON file through which a running simulator is inspected from other processes.

A `kubelet-sim serve` process rewrites `<dir>/kubelet-sim.json` after every change;
`kubelet-sim list/allocate/preferred` read it to learn which resources are registered
and which socket serves each. Writes go to a temporary file in the same directory and
are renamed over the target, so a reader never sees a half-written file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from kubelet_sim.model import Snapshot

SNAPSHOT_NAME = "kubelet-sim.json"
# The file is for humans and one-shot commands; the full log stays in memory.
FILE_EVENTS = 200


def snapshot_path(directory: Path) -> Path:
    return directory / SNAPSHOT_NAME


def write_snapshot(path: Path, snapshot: Snapshot) -> None:
    data = json.dumps(snapshot.to_dict(max_events=FILE_EVENTS), indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_snapshot(path: Path) -> Snapshot:
    """Load a snapshot; FileNotFoundError when no simulator serves that directory."""
    with path.open(encoding="utf-8") as handle:
        return Snapshot.from_dict(json.load(handle))
