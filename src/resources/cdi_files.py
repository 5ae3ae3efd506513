"""CDI spec files on disk: their names and their atomic writes.

Apart from the spec builder (`resources.cdi_spec`), so that what writes and
compares files (the reconciler's CDI actuator, a DRA claim's transient spec)
does not load the driver layout and hooks that only building a spec needs:
a node with no CDI strategy never loads them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

Spec = dict[str, Any]


def spec_file_name(spec: Spec) -> str:
    """`<vendor>-<class>.json`, e.g. `k8s.device-plugin.nvidia.com-gpu.json`."""
    return str(spec["kind"]).replace("/", "-") + ".json"


def write_spec(
    directory: str | os.PathLike[str], spec: Spec, file_name: str | None = None
) -> Path:
    """Write `spec` atomically (temp file + rename) with mode 0644; return its path.

    A runtime reading the directory at any moment sees either the old file or
    the complete new one, never a partial write. The file is named after the
    spec's kind unless `file_name` says otherwise (a claim's transient spec).
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / (file_name or spec_file_name(spec))
    fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(spec, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o644)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
