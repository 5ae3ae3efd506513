"""The API budget of one node at steady state, on a scaled clock.

The plugin's node watch (config label and cordon annotation) and the
labeller's two publishers run with their production settings on a clock 600
times faster than real time (the emulated server scales its watch timeouts
alike), for 40 simulated minutes after start-up, while the node's status
changes every 5 minutes as a kubelet's does, and an operator cordons a GPU by
annotation and releases it. What they send in that window is counted: only
watches, about as many as the watch lengths allow, and never a list, a GET or
a write. The DRA mode's slice publisher, asked every minute whether its
slices are pending and told to write them anyway, is held to the same.
"""

from __future__ import annotations

import asyncio
import collections
import threading

from devices.model import Inventory
from kube.node_features import NodeFeaturePublisher
from kube.node_labels import NodeLabelPublisher
from kube.node_watch import NodeLabelWatch
from kube.pacing import LABELLER_WATCH_TIMEOUTS, Clock
from kube.resource_slices import SlicePublisher
from resources.dra_slices import pack, slice_devices
from resources.options import MigStrategy
from tests.unit.kube.apiserver import ApiServer
from tests.unit.resources.nodes import make_gpu
from tests.waiting import eventually

NODE = "gpu-node-1"
SCALE = 1 / 600
MINUTE = 60 * SCALE  # real seconds per simulated minute
LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def _by_verb(tally: collections.Counter[tuple[str, str]], agent: str) -> dict[str, int]:
    return {verb: n for (who, verb), n in tally.items() if who == agent and n}


async def test_a_steady_node_only_renews_its_watches(apiserver: ApiServer) -> None:
    apiserver.handler.time_scale = SCALE
    await apiserver.add_node(NODE, {"nvidia.com/device-plugin.config": "a100"})
    clock = Clock(SCALE)
    access = apiserver.access
    listed = threading.Event()
    plugin = NodeLabelWatch(
        api=access("plugin"),
        node_name=NODE,
        label="nvidia.com/device-plugin.config",
        on_value=lambda value: listed.set(),
        annotation="nvidia.com/gpu.cordon",  # as the plugin follows its node
        on_annotation=lambda value: None,
        clock=clock,
    )
    feature = NodeFeaturePublisher(
        access("gfd-nodefeature"),
        node_name=NODE,
        namespace="gpu-operator",
        watch_timeouts=LABELLER_WATCH_TIMEOUTS,
        clock=clock,
    )
    labels = NodeLabelPublisher(
        access("gfd-nodelabels"), NODE, watch_timeouts=LABELLER_WATCH_TIMEOUTS, clock=clock
    )
    stop = threading.Event()

    def passes() -> None:  # the labeller's loop: a pass a minute
        while True:
            feature.apply(LABELS)
            labels.apply(LABELS)
            if clock.wait(stop, 60.0):
                return

    for part in (plugin, feature, labels):
        part.start()
    loop = asyncio.create_task(asyncio.to_thread(passes))
    try:
        assert await asyncio.to_thread(listed.wait, 10.0)
        await asyncio.sleep(2 * MINUTE)  # start-up: lists, the first create and patch
        before = collections.Counter(apiserver.handler.tally)
        for beat in range(8):  # 40 minutes, a status heartbeat every 5
            await asyncio.sleep(5 * MINUTE)
            await apiserver.handler.patch(f"/api/v1/nodes/{NODE}", json={"status": {"beat": beat}})
            if beat in (2, 5):  # an operator cordons a GPU, then releases it
                cordon = "0" if beat == 2 else None
                await apiserver.set_annotations(NODE, {"nvidia.com/gpu.cordon": cordon})
        window = collections.Counter(apiserver.handler.tally) - before
    finally:
        stop.set()
        await loop
        await asyncio.to_thread(plugin.stop, 5.0)
        await asyncio.to_thread(feature.close)
        await asyncio.to_thread(labels.close)

    # 40 minutes of 5-10 minute watches: 4 to 9 of them, depending on where
    # the window cuts; of 15-30 minute watches, 1 to 4.
    plugin_sent = _by_verb(window, "plugin")
    assert set(plugin_sent) == {"watch"}, plugin_sent
    assert 4 <= plugin_sent["watch"] <= 9, plugin_sent
    for agent in ("gfd-nodefeature", "gfd-nodelabels"):
        sent = _by_verb(window, agent)
        assert set(sent) <= {"watch"}, (agent, sent)
        assert 1 <= sent.get("watch", 0) <= 4, (agent, sent)
    # The budget (12 an hour for the plugin and one labeller, about 8 + 2.7 on
    # average) is a fleet's mean: `make bench` measures it over 20 nodes.


async def test_a_steady_dra_publisher_only_renews_its_watch(apiserver: ApiServer) -> None:
    scale = 1 / 6000  # two simulated hours in a little over a second
    apiserver.handler.time_scale = scale
    await apiserver.add_node(NODE)
    clock = Clock(scale)
    devices = slice_devices(
        Inventory("550.54.15", "12.4", tuple(make_gpu(i) for i in range(8))), MigStrategy.NONE
    )
    slices = pack(devices, driver="gpu.nvidia.com", node=NODE, pool_generation=0)
    hints: list[None] = []
    publisher = SlicePublisher(
        apiserver.access("plugin-slices"),
        node_name=NODE,
        driver="gpu.nvidia.com",
        on_change=lambda: hints.append(None),
        clock=clock,
    )
    stop = threading.Event()
    due: list[bool] = []  # what each pass's `pending` said

    def passes() -> None:  # the plugin's loop, a pass a minute (at most)
        while True:
            due.append(publisher.pending(slices))
            publisher.write(slices)  # even when not pending: equal slices send nothing
            if clock.wait(stop, 60.0):
                return

    publisher.start()
    loop = asyncio.create_task(asyncio.to_thread(passes))
    try:
        await eventually(lambda: publisher.state().converged, what="the slices written")
        before = collections.Counter(apiserver.handler.tally)
        passes_before, hints_before = len(due), len(hints)
        await asyncio.sleep(120 * 60 * scale)
        window = collections.Counter(apiserver.handler.tally) - before
        window_due, window_hints = due[passes_before:], hints[hints_before:]
    finally:
        stop.set()
        await loop
        await asyncio.to_thread(publisher.close)

    # Two hours of 45-90 minute watches: 1 to 4 renewals, and nothing else.
    sent = _by_verb(window, "plugin-slices")
    assert set(sent) <= {"watch"}, sent
    assert 1 <= sent.get("watch", 0) <= 4, sent
    # Renewals resume the watch: no list, no hint, nothing ever pending.
    assert window_due, "no pass ran in the window"
    assert not any(window_due), window_due
    assert window_hints == []
