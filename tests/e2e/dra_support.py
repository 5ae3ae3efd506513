"""What the DRA end-to-end tests share: an emulated API server, a kubelet, a node.

The plugin runs as a process with `--node-name`, a KUBECONFIG for the emulated
API server, the kubelet's plugins_registry and plugins directories under the
test's socket directory, and a config file whose `kubeletApi` a test rewrites
to flip the node. `DraNode` holds those paths, so a test can stop the plugin
and start it again on the same node (same checkpoint, same CDI directory).
The kubelet simulator (`dra_sim`) watches plugins_registry as the kubelet's
plugin watcher does and makes the kubelet's NodePrepareResources calls.

The fixtures are imported by the test modules that use them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kube.resource_claims import AllocatedDevice, OpaqueConfig
from kubelet.dra.types import ClaimRef
from kubelet_sim import KubeletSimulator
from kubelet_sim.model import DraDriverView
from resources.claim_spec import claim_device_id, claim_spec_file
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.kube.apiserver import ApiServer, kubeconfig, running_apiserver
from tests.waiting import eventually

NODE = "gpu-node-1"
DRIVER = "gpu.nvidia.com"
GPU = "nvidia.com/gpu"
GPU0 = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"  # dgx-a100, index 0, minor 0
# The plugin loads the Kubernetes client once DRA mode starts: seconds on a busy machine.
FIRST_PUBLISH = 30.0


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server


@pytest.fixture
async def dra_sim(sock_dir: Path) -> AsyncIterator[KubeletSimulator]:
    async with KubeletSimulator(
        sock_dir, registry_dir=sock_dir / "reg", write_snapshot_file=False
    ) as simulator:
        yield simulator


def config_text(api: str) -> str:
    return f"version: v1\nflags:\n  plugin:\n    kubeletApi: {api}\n"


@dataclass
class DraNode:
    """One simulated node's plugin: its arguments, files and API access, restartable."""

    sock_dir: Path
    tmp_path: Path
    api: ApiServer
    profile: str = "dgx-a100"
    extra: Sequence[str] = field(default_factory=tuple)

    @property
    def config(self) -> Path:
        return self.tmp_path / "config.yaml"

    @property
    def events(self) -> Path:
        return self.tmp_path / "events.jsonl"

    @property
    def cdi(self) -> Path:
        return self.tmp_path / "cdi"

    @property
    def registrar(self) -> Path:
        return self.sock_dir / "reg"

    @property
    def plugins(self) -> Path:
        return self.sock_dir / "plugins"

    @property
    def registration_socket(self) -> Path:
        return self.registrar / f"{DRIVER}-reg.sock"

    @property
    def plugin_socket(self) -> Path:
        return self.plugins / DRIVER / "dra.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugins / DRIVER / "checkpoint.json"

    def args(self) -> list[str]:
        return plugin_args(
            self.sock_dir,
            self.profile,
            *("--config-file", str(self.config), "--node-name", NODE),
            *("--kubelet-registrar-directory-path", str(self.registrar)),
            *("--kubelet-plugins-directory-path", str(self.plugins)),
            *("--cdi-spec-dir", str(self.cdi), "--mock-nvml-events", str(self.events)),
            *self.extra,
        )

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(kubeconfig(self.tmp_path / "kubeconfig", self.api.url))}

    def process(self, mode: str = "dra") -> PluginProcess:
        """The plugin for this node, in `mode` unless a config file is there already."""
        if not self.config.exists():
            self.config.write_text(config_text(mode))
        self.events.touch()
        return PluginProcess(self.args(), env=self.env())

    def claim_specs(self) -> set[str]:
        """The claim spec files in the CDI directory (the node's own specs left out)."""
        if not self.cdi.is_dir():
            return set()
        return {p.name for p in self.cdi.iterdir() if "-claim_" in p.name}


async def published(api: ApiServer, check: Any, what: str) -> list[dict[str, Any]]:
    """The devices of the node's slices, once `check(devices)` holds."""

    async def devices() -> list[dict[str, Any]] | None:
        # (a slice of counter sets has no devices)
        found = [d for s in (await api.slices()).values() for d in s["spec"].get("devices") or ()]
        return found if check(found) else None

    result: list[dict[str, Any]] = await eventually(
        devices, what=what, timeout=FIRST_PUBLISH, detail=lambda: "see the API server"
    )
    return result


def stored_slices(api: ApiServer) -> list[dict[str, Any]]:
    """The ResourceSlices the emulator holds, read in memory (works while it is down)."""
    return [
        stored.raw
        for (resource, _, _), stored in api.handler.objects.items()
        if getattr(resource, "plural", None) == "resourceslices" and not stored.deleted
    ]


async def create_claim(
    api: ApiServer,
    name: str,
    devices: Iterable[str],
    *,
    config: Sequence[OpaqueConfig] = (),
    namespace: str = "default",
) -> ClaimRef:
    """A claim allocated to `devices` of this node (request `gpu`), as the scheduler leaves it."""
    results = [AllocatedDevice("gpu", DRIVER, NODE, device) for device in devices]
    created = await api.create_claim(namespace, name, results, config=config)
    return ClaimRef(namespace, created["metadata"]["uid"], name)


def cdi_ids(claim: ClaimRef, *devices: str) -> list[list[str]]:
    """The CDI IDs a prepared claim answers with, device by device."""
    return [[claim_device_id(DRIVER, claim.uid, device)] for device in devices]


def spec_name(claim: ClaimRef) -> str:
    return claim_spec_file(DRIVER, claim.uid)


def spec_devices(cdi: Path, claim: ClaimRef) -> list[str]:
    """The device names in a claim's CDI spec file."""
    spec = json.loads((cdi / spec_name(claim)).read_text())
    return [device["name"] for device in spec["devices"]]


def answered(response: Any, claim: ClaimRef) -> tuple[str, list[list[str]]]:
    """(error, CDI IDs per device) of one claim in a NodePrepareResources answer."""
    entry = response.claims[claim.uid]
    return entry.error, [list(device.cdi_device_ids) for device in entry.devices]


async def serving_dra(api: ApiServer, sim: KubeletSimulator, gpus: int = 8) -> DraDriverView:
    """Once the node's slices hold `gpus` devices and the kubelet registered the driver."""
    await published(api, lambda d: len(d) == gpus, "the node's slices")
    return await sim.wait_dra_registered(DRIVER, timeout=FIRST_PUBLISH)
