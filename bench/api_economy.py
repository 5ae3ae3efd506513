"""Steady-state Kubernetes API traffic per node, and what it means for a 10,000-node fleet.

Every node runs the plugin and the labeller, so their API requests multiply by
the fleet. This group runs, for each of `nodes` simulated nodes and against
one emulated API server (kmock, real HTTP, the official client):

* the plugin's node watch (`kube.node_watch.NodeLabelWatch`: the config
  label and the GPU cordon annotation), exactly as the plugin builds it (5-10
  minute watches);
* the labeller's two API sinks: the NodeFeature publisher and the node-label
  publisher (`kube.node_features`, `kube.node_labels`), with the labeller's
  watch lengths, each offered the node's label set every 60 s as
  `gpu-feature-discovery`'s passes do. The label set is computed once by the
  real labeller code (`dgx-a100`); what a pass computes does not change what
  it sends, only whether it differs from what is published.
* the DRA mode's ResourceSlice publisher (`kube.resource_slices`, 45-90
  minute watches), offered the node's slices every 60 s (the `dgx-a100`
  devices, built once by `resources.dra_slices`): a DRA node runs it beside
  the label watch and the labeller, so its rows add the three.

Meanwhile each node's status is updated every 5 minutes, as a kubelet does, so
the watches carry events that must not turn into requests.

**Time is scaled, not extrapolated**: the components run on a `pacing.Clock`
and the emulated server on the same factor (1 simulated minute = 0.25 s), so
their schedules are the production ones, run faster. After a warm-up that
takes the start-up requests (list, watch, the pod lookup, the first create or
patch), requests are counted by User-Agent over a steady window of simulated
time (two hours; 30 minutes with `--quick`) and reported per node and hour; the
start-up requests are reported on their own row. The QPS
row multiplies the mean by 10,000 nodes. Socket timeouts are not scaled, so a
loaded machine can only make watches look early (resumed, still no list), not
fail.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.report import Goal, Outcome, Row, Stat

SEED = 20240601
SCALE = 1 / 240  # real seconds per simulated second
PASS_INTERVAL = 60.0  # gpu-feature-discovery's default --sleep-interval
HEARTBEAT = 300.0  # kubelet's node status report frequency
WARM_UP = 60.0  # after every component's first list and publish
BUDGET = 12.0  # requests per node and hour, plugin and labeller together
FLEET = 10_000
LABEL = "nvidia.com/device-plugin.config"
NAMESPACE = "gpu-operator"
COMPONENTS = ("plugin", "gfd-nodefeature", "gfd-nodelabels", "plugin-slices")
DRIVER = "gpu.nvidia.com"
OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gfd", "uid": "ds-uid"}


@dataclass
class Node:
    name: str
    parts: list[Any] = field(default_factory=list)  # watches and publishers, to close
    slices: list[dict[str, Any]] = field(default_factory=list)


def _labels() -> dict[str, str]:
    """One pass of the real labeller on the `dgx-a100` profile."""
    from labels.flags import parse_arguments
    from labels.options import choose_config, resolve_options
    from labels.runner import default_opener, label_once

    values = parse_arguments(
        ["--mock-nvml", "dgx-a100", "--no-timestamp", "--machine-type-file", ""], {}
    )
    options = resolve_options(values, choose_config(values, label_value=None, current=None))
    library = default_opener(options)
    library.init()
    try:
        return label_once(options, library, None)
    finally:
        library.shutdown()


def _slices(node: str) -> list[dict[str, Any]]:
    """The node's ResourceSlices on the `dgx-a100` profile, as the DRA mode publishes them."""
    from devices.simulated import SimulatedLibrary
    from resources.dra_slices import pack, slice_devices
    from resources.options import MigStrategy

    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    devices = slice_devices(library.inventory(), MigStrategy.NONE)
    return pack(devices, driver=DRIVER, node=node, pool_generation=0)


def _agent(component: str, node: str) -> str:
    return f"{component}/{node}"


def _start(url: str, names: list[str], clock: Any, watching: threading.Semaphore) -> list[Node]:
    """Starts every node's four components (blocking: run it off the event loop)."""
    from kube.client import ApiAccess
    from kube.node_features import NodeFeaturePublisher
    from kube.node_labels import NodeLabelPublisher
    from kube.node_watch import NodeLabelWatch
    from kube.pacing import LABELLER_WATCH_TIMEOUTS
    from kube.resource_slices import SlicePublisher
    from states.cordon import CORDON_ANNOTATION

    access = ApiAccess.for_host(url)
    nodes = [Node(name, slices=_slices(name)) for name in names]
    for index, node in enumerate(nodes):
        rng = random.Random(SEED * 1000 + index)
        watch = NodeLabelWatch(
            api=access.named(_agent("plugin", node.name)),
            node_name=node.name,
            label=LABEL,
            on_value=lambda value: watching.release(),
            annotation=CORDON_ANNOTATION,
            on_annotation=lambda value: None,
            clock=clock,
            rng=rng,
        )
        feature = NodeFeaturePublisher(
            access.named(_agent("gfd-nodefeature", node.name)),
            node_name=node.name,
            namespace=NAMESPACE,
            pod_name=f"gfd-{node.name}",
            watch_timeouts=LABELLER_WATCH_TIMEOUTS,
            clock=clock,
            rng=rng,
        )
        labels = NodeLabelPublisher(
            access.named(_agent("gfd-nodelabels", node.name)),
            node.name,
            watch_timeouts=LABELLER_WATCH_TIMEOUTS,
            clock=clock,
            rng=rng,
        )
        slices = SlicePublisher(
            access.named(_agent("plugin-slices", node.name)),
            node_name=node.name,
            driver=DRIVER,
            clock=clock,
            rng=rng,
        )
        node.parts = [watch, feature, labels, slices]
        for part in node.parts:
            part.start()
    return nodes


def _stop(nodes: list[Node]) -> None:
    for node in nodes:
        watch, feature, labels, slices = node.parts
        watch.stop(5.0)
        for publisher in (feature, labels, slices):
            publisher.close()


def _passes(
    nodes: list[Node],
    labels: dict[str, str],
    clock: Any,
    stop: threading.Event,
    published: threading.Event,
) -> None:
    """gpu-feature-discovery's loop for every node: publish every PASS_INTERVAL."""
    errors: Counter[str] = Counter()
    while True:
        failed = 0
        for node in nodes:
            _, feature, node_labels, slices = node.parts
            for part in (feature, node_labels):
                try:
                    part.apply(labels)
                except Exception as exc:  # counted and reported, never fatal
                    failed += 1
                    errors[str(exc)[:120]] += 1
            if slices.pending(node.slices):  # as the plugin's loop asks before it writes
                try:
                    slices.write(node.slices)
                except Exception as exc:  # counted and reported, never fatal
                    failed += 1
                    errors[str(exc)[:120]] += 1
        if not failed:
            published.set()
        if clock.wait(stop, PASS_INTERVAL):
            break
    if errors:
        print(f"bench api: publish errors {dict(errors)}", flush=True)


async def _heartbeats(api: Any, names: list[str], stop: asyncio.Event) -> None:
    """Each node's status changes every HEARTBEAT (kubelet), at its own phase."""
    rng = random.Random(SEED)
    loop = asyncio.get_running_loop()
    due = {name: loop.time() + rng.uniform(0, HEARTBEAT * SCALE) for name in names}
    beat = 0
    while not stop.is_set():
        name = min(due, key=due.__getitem__)
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, due[name] - loop.time()))
            return
        except TimeoutError:
            pass
        beat += 1
        response = await api.handler.patch(
            f"/api/v1/nodes/{name}", json={"status": {"heartbeat": beat}}
        )
        assert response.status == 200, await response.text()
        due[name] += HEARTBEAT * SCALE


def _count(tally: Counter[tuple[str, str]]) -> dict[str, Counter[str]]:
    """Requests of each component on each node, by verb."""
    by_agent: dict[str, Counter[str]] = {}
    for (agent, verb), n in tally.items():
        by_agent.setdefault(agent, Counter())[verb] += n
    return by_agent


async def run(*, quick: bool) -> Outcome:
    try:
        import kmock  # noqa: F401
    except ImportError:
        return Outcome(skipped="kmock is not installed (pip install -e '.[dev]')")
    from kube.pacing import Clock
    from tests.unit.kube.apiserver import running_apiserver

    count = 8 if quick else 20
    minutes = 30.0 if quick else 120.0
    names = [f"gpu-node-{index:03d}" for index in range(count)]
    clock = Clock(SCALE)
    labels = await asyncio.to_thread(_labels)
    async with running_apiserver() as api:
        api.handler.time_scale = SCALE
        api.handler.keep_requests = 2  # counted in `tally`; see the emulator
        for name in names:
            await api.add_node(name, {LABEL: "default"})
            await api.create(
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"gfd-{name}",
                        "namespace": NAMESPACE,
                        "ownerReferences": [OWNER],
                    },
                },
            )
        stop_beats = asyncio.Event()
        beats = asyncio.create_task(_heartbeats(api, names, stop_beats))
        stop_passes, published = threading.Event(), threading.Event()
        watching = threading.Semaphore(0)
        began = time.monotonic()
        nodes = await asyncio.to_thread(_start, api.url, names, clock, watching)
        try:
            passes = asyncio.create_task(
                asyncio.to_thread(_passes, nodes, labels, clock, stop_passes, published)
            )
            # Start-up is over once every label watch has listed and every
            # labeller has published; then a little more for the first watches.
            for _ in names:
                listed = await asyncio.to_thread(watching.acquire, True, 300.0)
                assert listed, "a label watch never listed"
            assert await asyncio.to_thread(published.wait, 300.0), "the labellers never published"
            ready = time.monotonic() - began
            await asyncio.sleep(WARM_UP * SCALE)
            before = Counter(api.handler.tally)
            started = time.monotonic()
            await asyncio.sleep(minutes * 60 * SCALE)
            after = Counter(api.handler.tally)
            real = time.monotonic() - started
        finally:
            stop_passes.set()
            await asyncio.to_thread(_stop, nodes)
        await passes
        stop_beats.set()
        await beats
    outcome = _outcome(names, _count(before), _count(after - before), minutes, real, len(labels))
    outcome.details["start_up_real_seconds"] = ready
    return outcome


def _outcome(
    names: list[str],
    warm_up: dict[str, Counter[str]],
    steady: dict[str, Counter[str]],
    minutes: float,
    real: float,
    label_count: int,
) -> Outcome:
    hours = minutes / 60

    def per_hour(component: str, node: str) -> float:
        return sum(steady.get(_agent(component, node), Counter()).values()) / hours

    rates = {c: [per_hour(c, name) for name in names] for c in COMPONENTS}
    note = f"{len(names)} nodes, {minutes:.0f} simulated min in {real:.1f} s"
    rows = [
        Row.of("api", "api.plugin", "req/node/h", rates["plugin"],
               note=f"node watch (label, cordon), 5-10 min watches; {note}"),
        Row.of("api", "api.gfd_nodefeature", "req/node/h", rates["gfd-nodefeature"],
               note="NodeFeature sink, 15-30 min watches, a pass a minute"),
        Row.of("api", "api.gfd_nodelabels", "req/node/h", rates["gfd-nodelabels"],
               note="--write-node-labels sink, 15-30 min watches, a pass a minute"),
        Row.of("api", "api.dra_slices", "req/node/h", rates["plugin-slices"],
               note="DRA ResourceSlice publisher, 45-90 min watches, a publish a minute"),
    ]  # fmt: skip
    budget = Goal(Stat.MEDIAN, BUDGET, inclusive=True)
    totals = {
        mode: [p + g for p, g in zip(rates["plugin"], rates[mode], strict=True)]
        for mode in ("gfd-nodefeature", "gfd-nodelabels")
    }
    for mode, values in totals.items():
        name = f"api.plugin+{mode.removeprefix('gfd-')}"
        note = f"one node, plugin and labeller; mean {statistics.mean(values):.1f}"
        rows.append(Row.of("api", name, "req/node/h", values, goal=budget, note=note))
    dra = {
        mode: [t + d for t, d in zip(values, rates["plugin-slices"], strict=True)]
        for mode, values in totals.items()
    }
    for mode, values in dra.items():
        name = f"api.plugin+slices+{mode.removeprefix('gfd-')}"
        note = f"one DRA node: label watch, slices, labeller; mean {statistics.mean(values):.1f}"
        rows.append(Row.of("api", name, "req/node/h", values, goal=budget, note=note))
    totals |= {f"dra+{mode}": values for mode, values in dra.items()}
    costlier = max(totals.values(), key=statistics.mean)
    ours = {_agent(c, name) for c in COMPONENTS for name in names}  # not the heartbeats
    steady_other = sum(
        n
        for agent, counts in steady.items()
        if agent in ours
        for verb, n in counts.items()
        if verb != "watch"
    )
    rows.append(
        Row.single("api", "api.steady_non_watch", "requests", float(steady_other),
                   goal=Goal(Stat.MEDIAN, 0, inclusive=True),
                   note=f"lists, GETs and writes in the window, all nodes; {label_count} labels")
    )  # fmt: skip
    qps = statistics.mean(costlier) * FLEET / 3600
    rows.append(
        Row.single("api", "api.qps_10k_nodes", "req/s", qps,
                   note="mean of the costliest node (device plugin or DRA) x 10,000 nodes / 3600 s")
    )  # fmt: skip
    # Start-up: what a node sends before its first watch, at whatever pace it got there.
    startup = {
        c: statistics.mean(
            sum(n for verb, n in warm_up.get(_agent(c, name), Counter()).items() if verb != "watch")
            for name in names
        )
        for c in COMPONENTS
    }
    rows.append(
        Row.single("api", "api.startup", "req/node", sum(startup.values()),
                   note="lists, GETs, creates, patches: "
                   + ", ".join(f"{c} {v:.1f}" for c, v in startup.items()))
    )  # fmt: skip
    verbs: Counter[str] = Counter()
    for agent, counts in steady.items():
        if agent in ours:
            verbs.update(counts)
    details = {
        "nodes": len(names),
        "simulated_minutes": minutes,
        "real_seconds": real,
        "scale": SCALE,
        "per_node_hour": rates,
        "steady_verbs": dict(verbs),
        "startup_per_node": startup,
    }
    return Outcome(rows=rows, details=details)
