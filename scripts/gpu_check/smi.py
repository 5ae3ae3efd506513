"""The reference table: what `nvidia-smi --query-gpu` says about each GPU.

The GPU check compares the plugin's discovery with nvidia-smi, an
independent reader of the same driver. The table comes from one of three
places, and every report says which:

- `nvidia-smi` itself, on a GPU node;
- a file holding nvidia-smi's output saved earlier (`--smi-csv`), to
  compare offline;
- a **simulated** table rendered from a node profile's YAML, for the dry
  run on a machine without a GPU. It is written from the raw YAML, not from
  the simulated backend's inventory, so the dry run still compares two
  readings of the profile through the same parser nvidia-smi's output goes
  through.

Values are kept as nvidia-smi prints them; `compare` decides what counts as
equal.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The order nvidia-smi prints the columns in; `compare` pairs them with our fields.
QUERY_FIELDS = (
    "uuid",
    "name",
    "memory.total",
    "pci.bus_id",
    "compute_cap",
    "driver_version",
    "mig.mode.current",
)
QUERY_COMMAND = (
    "nvidia-smi",
    f"--query-gpu={','.join(QUERY_FIELDS)}",
    "--format=csv,noheader,nounits",
)
SMI_TIMEOUT_SECONDS = 60.0


class SmiError(Exception):
    """The reference table could not be read; the message is one line."""


@dataclass(frozen=True)
class SmiTable:
    """One row per GPU (field -> value as printed) and where the rows came from."""

    source: str  # one line for the report, e.g. "nvidia-smi (real)"
    rows: tuple[dict[str, str], ...]
    simulated: bool = False


def parse_csv(text: str) -> tuple[dict[str, str], ...]:
    """Parse `--format=csv,noheader,nounits` output: one GPU a line, `, ` between values.

    Raises:
        SmiError: a line does not have one value per queried field.
    """
    rows: list[dict[str, str]] = []
    lines = [line for line in text.splitlines() if line.strip()]
    for number, values in enumerate(csv.reader(lines, skipinitialspace=True), start=1):
        if len(values) != len(QUERY_FIELDS):
            raise SmiError(
                f"line {number} has {len(values)} values, expected {len(QUERY_FIELDS)} "
                f"({', '.join(QUERY_FIELDS)}): {lines[number - 1]!r}"
            )
        rows.append(dict(zip(QUERY_FIELDS, (v.strip() for v in values), strict=True)))
    return tuple(rows)


def query_nvidia_smi(*, timeout: float = SMI_TIMEOUT_SECONDS) -> SmiTable:
    """Run nvidia-smi (read-only query) and parse its table.

    Raises:
        SmiError: nvidia-smi is missing, fails, or prints something unexpected.
    """
    executable = shutil.which(QUERY_COMMAND[0])
    if executable is None:
        raise SmiError("nvidia-smi is not on PATH")
    try:
        done = subprocess.run(
            [executable, *QUERY_COMMAND[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SmiError(f"nvidia-smi did not answer within {timeout:.0f}s") from None
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        reason = said[-1] if said else "no output"
        raise SmiError(f"nvidia-smi exited with status {done.returncode}: {reason}")
    return SmiTable(source=f"{' '.join(QUERY_COMMAND)} (real)", rows=parse_csv(done.stdout))


def read_saved(path: Path) -> SmiTable:
    """A table saved earlier with the same query (`nvidia-smi ... > file`).

    Raises:
        SmiError: the file cannot be read or parsed.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise SmiError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return SmiTable(source=f"saved nvidia-smi output in {path}", rows=parse_csv(text))


def _mig_mode(gpu: dict[str, Any]) -> str:
    # A profile may leave migCapable out; a GPU with MIG on is MIG-capable by definition.
    if gpu.get("migEnabled") is True:
        return "Enabled"
    return "Disabled" if gpu.get("migCapable") is True else "[N/A]"


def render_profile(profile: dict[str, Any]) -> str:
    """What nvidia-smi would print for the GPUs a node profile describes.

    Raises:
        SmiError: the profile says NVML fails (`initError`), as nvidia-smi would.
    """
    if profile.get("initError"):
        raise SmiError(f"nvidia-smi (simulated) fails on this node: {profile['initError']}")
    driver = str(profile.get("driverVersion", ""))
    lines = []
    for gpu in profile.get("gpus") or []:
        values = (
            str(gpu.get("uuid", "")),
            str(gpu.get("name", "")),
            str(gpu.get("memoryMiB", "")),
            str(gpu.get("pciBusID", "")),
            str(gpu.get("computeCapability", "")),
            driver,
            _mig_mode(gpu),
        )
        lines.append(", ".join(values))
    return "".join(f"{line}\n" for line in lines)


def simulated_table(profile_path: Path) -> SmiTable:
    """The simulated reference for a node profile file.

    Raises:
        SmiError: the file cannot be read, is not a YAML mapping, or says NVML fails.
    """
    try:
        loaded = yaml.safe_load(profile_path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SmiError(f"cannot read node profile {profile_path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise SmiError(f"node profile {profile_path} is not a YAML mapping")
    return SmiTable(
        source=(
            f"SIMULATED nvidia-smi table rendered from node profile {profile_path} "
            "(nvidia-smi was not run)"
        ),
        rows=parse_csv(render_profile(loaded)),
        simulated=True,
    )
