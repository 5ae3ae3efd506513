"""The PromQL of the alerts and of the dashboard, against what a running plugin exports.

Every metric and label value they select must exist in a scrape of the
plugin's `/metrics`, so a renamed metric breaks this test rather than an alert
(tests/unit/deploy/test_monitoring.py checks the objects themselves).
"""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubelet_sim import KubeletSimulator
from tests.e2e.harness import PluginProcess, plugin_args
from tests.unit.deploy.monitoring import (
    TARGET_LABELS,
    alert_rules,
    dashboard_targets,
    matches,
    selectors,
)


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets, from a plugin serving a simulated DGX A100."""

    async def run() -> str:
        directory = tmp_path_factory.mktemp("kubelet")
        async with (
            KubeletSimulator(directory, write_snapshot_file=False) as sim,
            PluginProcess(plugin_args(sim.directory)) as plugin,
        ):
            await sim.wait_registered("nvidia.com/gpu", timeout=20)
            await plugin.wait_state(lambda s: s["state"] == "serving", timeout=20)
            reply = await plugin.get("/metrics")
            assert reply.status == 200
            return reply.body.decode()

    text = asyncio.run(run())
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        # A family with no samples yet (a labelled counter never incremented)
        # still exists under its sample names.
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
        for suffix in suffixes.get(family.type, [""]):
            samples.setdefault(family.name + suffix, [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.labels)
    return samples


def check_expression(expr: str, scrape: dict[str, list[dict[str, str]]]) -> int:
    found = 0
    for metric, wanted in selectors(expr):
        found += 1
        assert metric in scrape, f"{metric} is not exported by the plugin"
        own = {k: v for k, v in wanted.items() if k not in TARGET_LABELS}
        if own:
            assert any(matches(own, labels) for labels in scrape[metric]), (
                f"no series {metric}{own} in a scrape of the plugin"
            )
    return found


def test_alert_expressions_select_series_the_plugin_exports(
    scrape: dict[str, list[dict[str, str]]],
) -> None:
    for name, rule in alert_rules().items():
        assert check_expression(rule["expr"], scrape) >= 1, name


def test_dashboard_queries_select_series_the_plugin_exports(
    scrape: dict[str, list[dict[str, str]]],
) -> None:
    exprs = dashboard_targets()
    assert sum(check_expression(e, scrape) for e in exprs) >= len(exprs)
