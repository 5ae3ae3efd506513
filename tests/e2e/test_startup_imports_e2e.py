"""What a node loads before its first registration: nothing heavy that it does not use.

Start-up is on the way from a pod's creation to its GPUs being schedulable.
The heavy parts a node may never use are loaded on first use
(`reconciler.on_demand`), not before the first registration: the Kubernetes
client (no node name or no API access), the DRA side and its gRPC stubs (no
DRA), the MPS daemon probe (no MPS sharing) and the CDI spec builder (no CDI
device list strategy). Read from the plugin's ``-X importtime`` lines up to
its registration line. A node that does use a part is the control: it loads
that part's module, so a reading that misses imports cannot pass (the DRA
side, which needs an API server to start, is controlled by its module being
real).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.waiting import eventually

GPU = "nvidia.com/gpu"
REGISTERED = f"registered {GPU} with the kubelet"
# One module that each heavy part cannot work without.
PARTS = {
    "cdi": "resources.cdi_spec",
    "dra": "kubelet.dra.server",
    "dra-stubs": "kubelet.api.dra.v1.api_pb2",
    "kube": "kube.official",
    "mps": "mps.probe",
}
# Parts whose control starts a plugin that uses them.
CONTROLLED = ("cdi", "kube", "mps")
UNREACHABLE_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:1\n"
    "users:\n- name: u\n  user:\n    token: t\n"
    "contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n"
)


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


def _importing(
    sim: KubeletSimulator, *extra: str, env: dict[str, str] | None = None
) -> PluginProcess:
    args = plugin_args(sim.directory, "dgx-a100", *extra)
    return PluginProcess(args, env={"PYTHONPROFILEIMPORTTIME": "1", **(env or {})})


@pytest.mark.parametrize("part", sorted(PARTS))
def test_each_part_is_named_by_a_real_module(part: str) -> None:
    assert importlib.util.find_spec(PARTS[part]) is not None


async def test_a_plain_node_registers_without_loading_a_heavy_part(
    sim: KubeletSimulator,
) -> None:
    async with _importing(sim) as plugin:
        await sim.wait_registered(GPU, timeout=30)
        await eventually(lambda: REGISTERED in plugin.stderr, what="the registration log line")
        imported = _imported(plugin.stderr, until=REGISTERED)
        await plugin.terminate()
    assert "kubelet.server" in imported  # the reading sees the plugin's own imports
    assert imported.isdisjoint(PARTS.values()), sorted(imported & set(PARTS.values()))


@pytest.mark.parametrize("part", CONTROLLED)
async def test_a_node_that_uses_a_part_loads_it(
    sim: KubeletSimulator, tmp_path: Path, part: str
) -> None:
    env: dict[str, str] = {}
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
        # A node name and API access: the node watch loads the client once the
        # first pass is over (the API server never answers; that is no matter).
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
        extra = ["--node-name", "n1"]
        env["KUBECONFIG"] = str(kubeconfig)
    async with _importing(sim, *extra, env=env) as plugin:
        await eventually(
            lambda: PARTS[part] in _imported(plugin.stderr), what=f"{PARTS[part]} to be imported"
        )
        await plugin.terminate()
