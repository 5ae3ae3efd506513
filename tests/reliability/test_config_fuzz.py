"""Config fuzz: mutated config files written while the plugin serves.

One plugin runs for the whole fuzz; Hypothesis writes one config per example
(atomically, as a ConfigMap update or an editor does). The expectation comes
from the plugin's own parts run in the test: `settings.load_config` with the
plugin's exact arguments and environment, then `build_desired` on the node's
inventory. A config that loads and plans must become the served plan (its
digest and warnings on `/state`, its devices at the kubelet); any other must
be rejected with its error on `/state` while the previous plan keeps serving
unchanged.

The node can be served through DRA as well: the plugin has a node name, an
emulated API server and the kubelet's plugin directories, so a config with
`flags.plugin.kubeletApi: dra` (about one in five, often with node-wide
sharing, which a DRA node ignores with a warning) moves it there. A DRA plan
is served once the node's slices hold its devices and no device-plugin
resource is left; a device-plugin plan once no slice is.

Examples depend on what ran before (the plan in force), so shrinking is off:
a failure reports the text that was written and the plan that was expected.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, note, settings
from hypothesis.control import currently_in_test_context

from devices.backends import open_library
from foundation.errors import PluginError
from kubelet_sim import EventKind, KubeletSimulator
from reconciler.plan.desired import Desired, build_desired
from settings import ConfigError, EffectiveConfig, load_config
from tests.e2e.dra_support import FIRST_PUBLISH, NODE, api, dra_sim
from tests.e2e.harness import PluginProcess, plugin_args
from tests.reliability.configs import EXAMPLES, REPO, config_texts, with_kubelet_api
from tests.reliability.observe import advertised, metric
from tests.unit.kube.apiserver import ApiServer, kubeconfig
from tests.waiting import eventually

__all__ = ["api", "dra_sim"]  # the fixtures

PROFILE = "a100-mig-mixed"
START = "dp-example-config1.yaml"
REJECTED = "new config rejected, still serving the previous one: "
WAIT = 10.0  # per example: the watch's debounce plus a reconcile, with room for a busy machine


@dataclass(frozen=True)
class Expected:
    """The plan to serve, or the texts the rejection reason must contain."""

    plan: Desired | None
    reason: tuple[str, ...] = ()


class Rig:
    """The running plugin, its config file and what it must be serving."""

    def __init__(
        self,
        *,
        sim: KubeletSimulator,
        api: ApiServer,
        plugin: PluginProcess,
        path: Path,
        serving: Desired,
    ) -> None:
        self.sim = sim
        self.api = api
        self.plugin = plugin
        self.path = path
        self.serving = serving
        self.counts: dict[str, int] = {}
        self.written: list[str] = []
        self.rejected: str | None = None  # the text of the standing rejection

    def __repr__(self) -> str:
        return f"Rig(serving={self.serving.digest}, written={len(self.written)})"

    def write(self, text: str) -> None:
        self.written.append(text)
        scratch = self.path.with_name(".config.tmp")
        scratch.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        os.replace(scratch, self.path)

    def expect(self) -> Expected:
        """What the plugin must make of the file, by its own parts."""
        try:
            config = load_config(self.plugin.args, self.plugin.env)
        except ConfigError as err:
            return Expected(plan=None, reason=(REJECTED, str(err)))
        try:
            return Expected(plan=plan_for(config))
        except PluginError as err:
            return Expected(plan=None, reason=(str(err),))

    async def failures(self) -> float:
        text = (await self.plugin.get("/metrics")).body.decode()
        return sum(
            metric(text, "nvidia_device_plugin_reconciles_total", result=result)
            for result in ("rejected", "error")
        )


def config_difference(rig: Rig, want: Desired) -> str:
    """How the config the plugin last logged as effective differs from the expected one."""
    logged = [
        line.split("effective config ", 1)[1]
        for line in rig.plugin.stderr.splitlines()
        if "effective config {" in line
    ]
    if not logged:
        return "the plugin logged no effective config"
    served = json.loads(logged[-1])  # the digest and the values not at their default
    expected = want.config.summary()
    keys = sorted(set(served) | set(expected))
    return (
        "config served vs expected: "
        + repr(
            {k: (served.get(k), expected.get(k)) for k in keys if served.get(k) != expected.get(k)}
        )
        + f"; last texts written: {rig.written[-4:]!r}"
    )


def plan_for(config: EffectiveConfig) -> Desired:
    library = open_library(
        config.flags.mock_nvml or None, driver_root=config.flags.driver_root_ctr_path
    )
    library.init()
    try:
        return build_desired(config, library.inventory())
    finally:
        library.shutdown()


def devices_of(plan: Desired) -> dict[str, tuple[str, ...]]:
    return {a.name: tuple(d.id for d in a.resource.devices) for a in plan.allocators}


@pytest.fixture
async def rig(dra_sim: KubeletSimulator, api: ApiServer, tmp_path: Path) -> AsyncIterator[Rig]:
    sim = dra_sim
    # kmock looks through every request it keeps for each new one: keep few.
    api.handler.keep_requests = 2
    await api.add_node(NODE)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    path = config_dir / "config.yaml"
    path.write_text(example_text(START))
    args = plugin_args(
        sim.directory,
        PROFILE,
        *("--config-file", str(path), "--cdi-spec-dir", str(tmp_path / "cdi")),
        *("--node-name", NODE, "--kubelet-registrar-directory-path", str(sim.directory / "reg")),
        *("--kubelet-plugins-directory-path", str(sim.directory / "plugins")),
    )
    env = {"KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", api.url))}
    async with PluginProcess(args, env=env) as plugin:
        state = await plugin.wait_state(lambda s: s["state"] == "serving", timeout=20)
        config = load_config(plugin.args, plugin.env)
        serving = plan_for(config)
        assert state["plan"]["digest"] == serving.digest
        rig = Rig(sim=sim, api=api, plugin=plugin, path=path, serving=serving)
        yield rig
        # Shown with `pytest -s`: how the examples split.
        print(f"config fuzz outcomes: {rig.counts}")


def example_text(name: str) -> str:
    return (REPO / "config" / name).read_text()


async def check_one(rig: Rig, text: str) -> str:
    """Write one config and wait until the plugin has dealt with it; returns the outcome."""
    if currently_in_test_context():
        note(f"config text: {text!r}")
        note(f"serving before: {rig.serving.digest} {rig.serving.resource_names}")
    failures_before = await rig.failures()
    seen = rig.sim.snapshot().events
    mark = seen[-1].seq if seen else 0
    rig.write(text)
    expected = rig.expect()
    previous = rig.serving
    if currently_in_test_context():
        note(f"expected: {expected.plan.digest if expected.plan else expected.reason}")
    if expected.plan is not None:
        want = expected.plan
        outcome = "unchanged" if want.digest == previous.digest else "applied"
        if want.dra is not None:
            outcome += " (dra)"
        try:
            state = await rig.plugin.wait_state(
                lambda s: (
                    s["plan"]["digest"] == want.digest
                    and s["state"] == "serving"
                    and s["reason"] is None
                    and s["mailbox_depth"] == 0
                    and all(r["registered"] for r in s["resources"])
                ),
                # The first move to DRA loads the Kubernetes client: seconds on a busy machine.
                timeout=FIRST_PUBLISH if want.dra is not None else WAIT,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}\n{config_difference(rig, want)}") from None
        if want.digest != previous.digest:
            # An edit that leaves the plan as it is (an unknown key added or taken
            # out) is not applied again: `/state` keeps the warnings it was applied with.
            assert state["plan"]["warnings"] == list(want.warnings)
        check_slices(rig, want, state)
        rig.serving = want
        rig.rejected = None
    else:
        outcome = "rejected"
        if text != rig.rejected:  # the same rejected content is not rejected again
            await _wait_metric_above(rig, failures_before)
        rig.rejected = text
        state = await rig.plugin.wait_state(
            lambda s: s["reason"] is not None and all(t in s["reason"] for t in expected.reason),
            timeout=WAIT,
        )
        assert state["state"] == "serving"
        assert state["plan"]["digest"] == previous.digest, "an invalid config replaced the plan"
    assert sorted(r["name"] for r in state["resources"]) == sorted(rig.serving.resource_names)
    wanted = devices_of(rig.serving)
    snap = await rig.sim.wait_for(lambda snap: advertised(snap) == wanted, timeout=WAIT)
    # Nothing in between either: every list the kubelet got since the write
    # belongs to the plan before or the plan after (or empties a resource).
    sizes = {name: {0, len(ids)} for name, ids in devices_of(previous).items()}
    for name, ids in wanted.items():
        sizes.setdefault(name, {0}).add(len(ids))
    lists = [e for e in snap.events_of(EventKind.LIST_RECEIVED) if e.seq > mark]
    odd = [
        (e.resource, e.device_count)
        for e in lists
        if e.device_count not in sizes.get(e.resource, {0})
    ]
    assert not odd, f"lists matching neither plan: {odd}"
    rig.counts[outcome] = rig.counts.get(outcome, 0) + 1
    return outcome


def check_slices(rig: Rig, want: Desired, state: dict[str, Any]) -> None:
    """A DRA plan's devices are in the node's slices; a device-plugin plan has none."""
    published = [d["name"] for s in rig.api.stored_slices() for d in s["spec"]["devices"]]
    if want.dra is None:
        assert published == [], "slices left on a node served through the device plugin"
        assert state["dra"] is None or state["dra"]["serving"] is False
        return
    assert sorted(published) == sorted(d.name for d in want.dra.devices)
    assert state["dra"]["serving"] is True
    assert state["dra"]["slices"]["converged"] is True


async def _wait_metric_above(rig: Rig, before: float) -> None:
    async def counted() -> bool:
        return await rig.failures() > before

    await eventually(counted, what="the config load failures metric to grow", timeout=WAIT)


async def test_reverting_a_rejected_edit_clears_the_reason(rig: Rig) -> None:
    good = example_text(START)
    assert await check_one(rig, example_text("time-slicing.yaml")) == "applied"
    assert await check_one(rig, good) == "applied"
    assert await check_one(rig, good.replace("mixed", "bogus")) == "rejected"
    rig.write(good)
    # A reload takes a fraction of a second; three is plenty.
    state = await rig.plugin.wait_state(lambda s: s["reason"] is None, timeout=3)
    assert state["plan"]["digest"] == rig.serving.digest


FUZZ = settings(
    deadline=None,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def with_shipped_examples(test: Callable[..., Any]) -> Callable[..., Any]:
    """Every shipped example first (each over the one before), two of them on a DRA node, then
    back to the device plugin; then the mutations."""
    texts = [example_text(name) for name in sorted(EXAMPLES)]
    texts += [with_kubelet_api(EXAMPLES[name], "dra") for name in ("mps.yaml", "time-slicing.yaml")]
    texts.append(example_text(START))
    for text in reversed(texts):
        test = example(text=text)(test)
    return test


# A fixed sample: the same 30 mutations in every `make test`.
@settings(FUZZ, max_examples=30, derandomize=True)
@with_shipped_examples
@given(text=config_texts())
async def test_config_fuzz(rig: Rig, text: str) -> None:
    await check_one(rig, text)


@pytest.mark.long
@pytest.mark.timeout(1800)
@settings(FUZZ, max_examples=1000)
@given(text=config_texts())
async def test_config_fuzz_long(rig: Rig, text: str) -> None:
    await check_one(rig, text)


# Found by this suite: `python -m settings --check` once ran the loader only,
# which passed the `health` section through unvalidated, so the checker approved
# files that the running plugin then rejected. The section is now checked on load.
@pytest.mark.parametrize(
    "health",
    [
        pytest.param("  a: 1\n", id="unknown-key"),
        pytest.param("  quietPeriod: soon\n", id="bad-duration"),
    ],
)
async def test_config_check_agrees_with_the_plugin(tmp_path: Path, health: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\nhealth:\n" + health)
    with pytest.raises(ConfigError, match=r"health\."):
        load_config([], {}, config_file=str(path))  # the plugin refuses the section on load
    check = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "settings",
        "--check",
        str(path),
        env={"PYTHONPATH": str(REPO / "src"), "PATH": os.environ.get("PATH", "")},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(check.communicate(), 30)
    assert check.returncode != 0, "the checker approved a config the plugin rejects"
    assert b"health" in err
