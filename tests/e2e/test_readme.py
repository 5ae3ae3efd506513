"""The `/state` fields and metrics of docs/inspection.md, against a running plugin."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubelet_sim import KubeletSimulator
from labels.endpoint import LabellerTelemetry
from mps.endpoint import DaemonTelemetry
from mps.layout import MpsLayout
from mps.supervisor import Supervisor
from tests.e2e.harness import PluginProcess, plugin_args
from tests.readme import first_column, section

PAGE = "docs/inspection.md"


def _paths(value: Any, prefix: str) -> Iterator[str]:
    """Dotted field paths of a /state document, as docs/inspection.md writes them."""
    if isinstance(value, dict):
        for key, item in value.items():
            if prefix == "health.devices":
                # Keyed by device: documented as health.devices.<uuid>.<field>.
                yield from _paths(item, f"{prefix}.<uuid>")
                continue
            path = f"{prefix}.{key}" if prefix else key
            yield path
            # Free-form contents, documented as a whole.
            if path not in ("config.values", "config.sources", "history[].detail") and not (
                path.startswith("health.devices.<uuid>.history")
                or path == "health.monitoring"
            ):
                yield from _paths(item, path)
    elif isinstance(value, list):
        for item in value:
            yield from _paths(item, f"{prefix}[]")


Running = tuple[KubeletSimulator, PluginProcess, Path]


@pytest.fixture
async def running(sock_dir: Path, tmp_path: Path) -> AsyncIterator[Running]:
    # Every optional part present: a config directory (selection), health
    # monitoring (health), a resource with devices and a history.
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    events = tmp_path / "events.jsonl"
    events.touch()
    extra = ["--config-directory", str(configs), "--mock-nvml-events", str(events)]
    async with (
        KubeletSimulator(sock_dir, write_snapshot_file=False) as sim,
        PluginProcess(plugin_args(sock_dir, "t4x4", *extra)) as plugin,
    ):
        await sim.wait_registered("nvidia.com/gpu", timeout=20)
        await plugin.wait_state(lambda s: s["ready"] and s["health"] is not None, timeout=20)
        yield sim, plugin, events


async def test_every_state_field_is_documented(running: Running) -> None:
    _, plugin, _ = running
    state = await plugin.state()
    for part in ("config", "selection", "plan", "health"):
        assert state[part] is not None, part
    actual = set(_paths(state, ""))
    documented = set(first_column(section("`/state`", page=PAGE)))
    assert actual - documented == set(), "fields missing from docs/inspection.md"
    assert documented - actual == set(), "fields docs/inspection.md has but /state lacks"


def _metric_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


async def test_every_metric_is_documented(running: Running, tmp_path: Path) -> None:
    sim, plugin, events = running
    # One of everything that puts labels on a metric: an RPC, a reload, a health change.
    view = await sim.wait_devices("nvidia.com/gpu", timeout=5)
    await sim.allocate("nvidia.com/gpu", [[view.devices[0].id]])
    with events.open("a") as out:
        out.write(json.dumps({"uuid": view.devices[1].id, "xid": 79}) + "\n")
    plugin.signal(signal.SIGHUP)
    await plugin.wait_state(
        lambda s: {"reconfigured", "device_health_changed"}
        <= {h["trigger"] for h in s["history"]}
    )
    metrics = section("Metrics", page=PAGE)
    prefixes = "process|nvidia_device_plugin|gpu_feature_discovery|mps_control_daemon"
    documented = set(re.findall(rf"`((?:{prefixes})_[a-z_]+)`", metrics))
    text = (await plugin.get("/metrics")).body.decode()
    served = _metric_names(text)
    labeller = LabellerTelemetry("127.0.0.1:0")
    labeller.published(3, 60.0)
    daemon = DaemonTelemetry("127.0.0.1:0")
    daemon.supervising(Supervisor([], layout=MpsLayout(tmp_path)))
    side = _metric_names(labeller.metrics.render().decode()) | _metric_names(
        daemon.metrics.render().decode()
    )
    actual = served | side
    build_infos = {"gpu_feature_discovery_build_info", "mps_control_daemon_build_info"}
    assert actual - documented - build_infos == set(), "metrics missing from docs/inspection.md"
    assert documented - actual == set(), "metrics docs/inspection.md has but nothing serves"
    # The labels of each plugin metric in the table are its real labels.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for line in metrics.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) != 4 or not cells[0].startswith("`nvidia_device_plugin_"):
            continue
        name = cells[0].strip("`")
        family = families[name.removesuffix("_total")]
        labels = {key for sample in family.samples for key in sample.labels if key != "le"}
        assert labels == set(re.findall(r"`([a-z_]+)`", cells[2])), name
