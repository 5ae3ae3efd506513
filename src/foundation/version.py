"""The version of this build, for ``--version``, the first log line and metrics.

Operators match a running pod to a release by this string, so every entry
point reports the same one. It comes from the installed distribution's
metadata (the wheel or editable install built from ``pyproject.toml``). A
checkout run without installing (``PYTHONPATH=src``) has no metadata; then
the ``pyproject.toml`` beside ``src/`` is read and the version is marked
``+source``, so such a run never passes for a release. Anything else reads
``unknown`` rather than failing: a version string must never stop the plugin.
"""

from __future__ import annotations

import functools
import platform
import tomllib
from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "build_info", "version"]

DISTRIBUTION = "nvidia-device-plugin-py"
_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _from_pyproject(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            project = tomllib.load(handle).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    found = project.get("version") if isinstance(project, dict) else None
    if not isinstance(found, str) or project.get("name") != DISTRIBUTION:
        return None
    return f"{found}+source"


@functools.cache
def version() -> str:
    """The version of this build, e.g. ``0.1.0`` (``0.1.0+source`` from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return _from_pyproject(_PYPROJECT) or "unknown"


def build_info() -> dict[str, str]:
    """Labels of a ``build_info`` metric: this build's version and the Python running it."""
    return {"version": version(), "python": platform.python_version()}
