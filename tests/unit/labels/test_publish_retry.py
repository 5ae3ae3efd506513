"""A sink that cannot publish for now: the pass is retried after a jittered backoff.

Scripted sinks fail a given number of passes with `PublishError` (what the
API-backed sinks raise when the API server is away); the waiter records how
long each wait was asked to be.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from labels.cli import serve
from labels.output import LabelSink, PublishError
from labels.waiting import Wake
from tests.unit.labels.helpers import ScriptedWaiter

ARGS = ["--mock-nvml", "t4x4", "--no-timestamp", "--output-file="]


class FlakySink:
    """Fails the first `failures` passes, then publishes."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.published: list[dict[str, str]] = []
        self.attempts = 0
        self.withdrawn = 0

    def publish(self, labels: Mapping[str, str]) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise PublishError("publishing NodeFeature x: cannot connect to the API server")
        self.published.append(dict(labels))

    def withdraw(self) -> None:
        self.withdrawn += 1


def run(sink: LabelSink, waiter: ScriptedWaiter, *extra: str) -> int:
    env = {"GFD_USE_NODE_FEATURE_API": "true", "NODE_NAME": "node-1"}
    return serve([*ARGS, *extra], env, waiter, node_feature=lambda options: sink,
                 configure_logging=False)  # fmt: skip


@pytest.mark.parametrize("interval", ["60s", "infinite"])
def test_failed_passes_are_retried_sooner_with_growing_jittered_delays(
    interval: str, logs: list[tuple[str, str]]
) -> None:
    sink = FlakySink(failures=4)
    waiter = ScriptedWaiter([Wake.TIMER] * 5)
    assert run(sink, waiter, "--sleep-interval", interval) == 0
    retries, after = waiter.timeouts[:4], waiter.timeouts[4:]
    ceilings = [1.0, 2.0, 4.0, 8.0]  # 1 s doubling; each delay drawn below its ceiling
    assert all(0.1 <= delay <= top for delay, top in zip(retries, ceilings, strict=True))
    assert len(set(retries)) == 4  # drawn, not a fixed schedule
    expected = 60.0 if interval == "60s" else math.inf
    assert after == [expected, expected]  # the backoff starts over after a success
    assert len(sink.published) == 2
    warnings = [text for level, text in logs if level == "WARNING" and "labelling again" in text]
    assert len(warnings) == 4
    assert all("\n" not in text for text in warnings)


def test_a_retry_never_waits_longer_than_the_interval() -> None:
    sink = FlakySink(failures=12)
    waiter = ScriptedWaiter([Wake.TIMER] * 12)
    assert run(sink, waiter, "--sleep-interval", "5s") == 0
    assert max(waiter.timeouts) <= 5.0
    assert waiter.timeouts[-1] == 5.0


def test_oneshot_exits_one_when_it_cannot_publish(logs: list[tuple[str, str]]) -> None:
    sink = FlakySink(failures=1)
    assert run(sink, ScriptedWaiter(), "--oneshot") == 1
    assert sink.attempts == 1
    errors = [text for level, text in logs if level == "ERROR"]
    assert errors == [
        "gpu-feature-discovery: publishing NodeFeature x: cannot connect to the API server"
    ]
