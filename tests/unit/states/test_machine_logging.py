"""How loudly the lifecycle logs each step: failures at WARNING, no-change steps quietly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from loguru import logger

from states.machine import Lifecycle
from states.names import Trigger


@pytest.fixture
def logged() -> Iterator[list[tuple[str, str]]]:
    lines: list[tuple[str, str]] = []
    handle = logger.add(
        lambda m: lines.append((m.record["level"].name, m.record["message"])), level="DEBUG"
    )
    yield lines
    logger.remove(handle)


def test_levels(logged: list[tuple[str, str]]) -> None:
    life = Lifecycle()
    life.fire(Trigger.FAILED, reason="kubelet socket missing (retrying in 1s)")
    life.fire(Trigger.FAILED, reason="kubelet socket missing (retrying in 2s)")
    life.fire(Trigger.RETRY)
    life.fire(Trigger.INITIALIZED)
    life.fire(Trigger.DEVICE_HEALTH_CHANGED)  # serving -> serving
    life.fire(Trigger.CONFIG_CHANGED)
    life.fire(Trigger.FAILED, reason="new config rejected, still serving the previous one: x")
    life.fire(Trigger.SHUTDOWN)
    assert logged == [
        ("WARNING", "lifecycle init -> blocked_on_error on failed: kubelet socket missing "
                    "(retrying in 1s)"),
        ("WARNING", "lifecycle blocked_on_error -> blocked_on_error on failed: kubelet socket "
                    "missing (retrying in 2s)"),
        ("INFO", "lifecycle blocked_on_error -> init on retry"),
        ("INFO", "lifecycle init -> serving on initialized"),
        ("DEBUG", "lifecycle serving -> serving on device_health_changed"),
        ("INFO", "lifecycle serving -> reconfiguring on config_changed"),
        ("WARNING", "lifecycle reconfiguring -> serving on failed: new config rejected, still "
                    "serving the previous one: x"),
        ("INFO", "lifecycle serving -> stopped on shutdown"),
    ]  # fmt: skip


def test_a_wait_with_a_new_reason_is_news(logged: list[tuple[str, str]]) -> None:
    life = Lifecycle()
    life.fire(Trigger.INITIALIZED, needs_mps=True)
    life.fire(Trigger.RETRY, reason="waiting for the MPS daemon: not ready (retrying in 1s)")
    life.fire(Trigger.RETRY, reason="waiting for the MPS daemon: not ready (retrying in 2s)")
    life.fire(Trigger.RETRY, reason="waiting for the MPS daemon: denied (retrying in 4s)")
    assert [level for level, _ in logged] == ["INFO", "INFO", "DEBUG", "INFO"]
