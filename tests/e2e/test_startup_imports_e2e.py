"""What a node loads before its first registration: what serving its GPUs needs, no more.

Start-up is on the way from a pod's creation to its GPUs being schedulable.
The parts a node does not use are loaded when first used, not before the
first registration: the CDI spec builder and driver layout (no CDI device
list strategy), the MPS daemon probe (no MPS sharing) and per-node config
selection (no config directory). Read from the plugin's ``-X importtime``
lines up to its registration line. A node that does use each part is the
control: it loads that part's module, so a reading that misses imports
cannot pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubelet.simulator import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
REGISTERED = f"registered {GPU} with the kubelet"
# One module that each optional part cannot work without.
PARTS = {
    "cdi": "cdi.driver",
    "mps": "mps.probe",
    "selection": "settings.selection",
}


def _imported(stderr: str, *, until: str | None = None) -> set[str]:
    """Modules named by ``-X importtime`` lines, up to the first line holding `until`."""
    names: set[str] = set()
    for line in stderr.splitlines():
        if until is not None and until in line:
            return names
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    if until is not None:
        raise AssertionError(f"the plugin never logged {until!r}:\n{stderr[-2000:]}")
    return names


def _importing(sim: KubeletSimulator, *extra: str) -> PluginProcess:
    args = plugin_args(sim.directory, "dgx-a100", *extra)
    return PluginProcess(args, env={"PYTHONPROFILEIMPORTTIME": "1"})


async def test_a_plain_node_registers_without_loading_cdi_mps_or_selection(
    sim: KubeletSimulator,
) -> None:
    async with _importing(sim) as plugin:
        await sim.wait_registered(GPU, timeout=30)
        await eventually(lambda: REGISTERED in plugin.stderr, what="the registration log line")
        imported = _imported(plugin.stderr, until=REGISTERED)
        await plugin.terminate()
    assert "kubelet.server" in imported  # the reading sees the plugin's own imports
    assert imported.isdisjoint(PARTS.values()), sorted(imported & set(PARTS.values()))


@pytest.mark.parametrize("part", sorted(PARTS))
async def test_a_node_that_uses_a_part_loads_it(
    sim: KubeletSimulator, tmp_path: Path, part: str
) -> None:
    if part == "cdi":
        extra = ["--device-list-strategy", "cdi-annotations", "--cdi-spec-dir", str(tmp_path)]
    elif part == "mps":
        # Held until its daemon answers (none here): the probe is what loads the module.
        config = tmp_path / "mps.yaml"
        config.write_text(
            "version: v1\nsharing:\n  mps:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: 2\n"
        )
        extra = ["--config-file", str(config), "--mps-root", "/run/nvidia/mps"]
        extra += ["--mps-container-root", str(tmp_path / "mps")]
    else:
        (tmp_path / "default").write_text("version: v1\n")
        extra = ["--config-directory", str(tmp_path), "--default-config", "default"]
    async with _importing(sim, *extra) as plugin:
        await eventually(
            lambda: PARTS[part] in _imported(plugin.stderr), what=f"{PARTS[part]} to be imported"
        )
        await plugin.terminate()
