"""`gpu-feature-discovery --metrics-address`: probes and metrics of the labeller."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from labels.cli import serve
from labels.endpoint import PASS_GRACE_SECONDS, LabellerTelemetry, start_telemetry
from labels.waiting import Wake
from settings import ConfigError
from tests.unit.labels.helpers import NOW, ScriptedWaiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def metric(telemetry: LabellerTelemetry, name: str) -> str | None:
    for line in telemetry.metrics.render().decode().splitlines():
        if line.startswith(name + " "):
            return line.split(" ", 1)[1]
    return None


def labelled(
    tmp_path: Path, telemetry: LabellerTelemetry, *args: str, script: tuple[Wake, ...] = ()
) -> int:
    return serve(
        ["--mock-nvml", "dgx-a100", "--output-file", str(tmp_path / "gfd"), *args],
        {},
        ScriptedWaiter(script),
        now=lambda: NOW,
        configure_logging=False,
        telemetry=telemetry,
    )


def test_passes_are_counted_and_make_it_ready(tmp_path: Path) -> None:
    clock = Clock()
    telemetry = LabellerTelemetry("127.0.0.1:0", clock=clock, wall=lambda: 1724632720.0)
    assert not telemetry.ready()
    assert metric(telemetry, "gpu_feature_discovery_labels") is None
    code = labelled(tmp_path, telemetry, "--oneshot")
    assert code == 0
    written = (tmp_path / "gfd").read_text().count("\n")
    assert telemetry.ready()
    assert metric(telemetry, "gpu_feature_discovery_labels") == f"{float(written)}"
    assert metric(telemetry, "gpu_feature_discovery_labelling_passes_total") == "1.0"
    assert metric(telemetry, "gpu_feature_discovery_last_labelled_timestamp_seconds") == (
        "1.72463272e+09"
    )


def test_periodic_run_withdraws_and_stays_healthy_while_on_time(tmp_path: Path) -> None:
    clock = Clock()
    telemetry = LabellerTelemetry("127.0.0.1:0", clock=clock)
    code = labelled(tmp_path, telemetry, "--sleep-interval", "30s", script=(Wake.TIMER,))
    assert code == 0
    assert metric(telemetry, "gpu_feature_discovery_labelling_passes_total") == "2.0"
    assert not telemetry.ready()  # the run ended and its labels were withdrawn
    assert not (tmp_path / "gfd").exists()


def test_overdue_labeller_is_unhealthy() -> None:
    clock = Clock()
    telemetry = LabellerTelemetry("127.0.0.1:0", clock=clock)
    clock.now += PASS_GRACE_SECONDS
    assert telemetry.healthy()  # the first pass may take the whole grace
    clock.now += 1
    assert not telemetry.healthy()
    telemetry.published(10, 60.0)
    clock.now += 60 + PASS_GRACE_SECONDS
    assert telemetry.healthy()
    clock.now += 1
    assert not telemetry.healthy()  # a pass hung past its interval and the grace
    telemetry.published(10, float("inf"))
    clock.now += 10**9
    assert telemetry.healthy()  # with an infinite interval no pass is due


def test_off_unless_asked() -> None:
    assert start_telemetry([], {}) is None
    assert start_telemetry(["--metrics-address="], {}) is None


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        pytest.param(
            ["--metrics-address", "nowhere"],
            {},
            "command line: --metrics-address: invalid address 'nowhere': expected HOST:PORT",
            id="flag",
        ),
        pytest.param(
            [],
            {"GFD_METRICS_ADDRESS": "1.2.3.4"},
            "environment: GFD_METRICS_ADDRESS: invalid address '1.2.3.4': expected HOST:PORT",
            id="variable",
        ),
    ],
)
def test_bad_address_names_the_flag(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        start_telemetry(argv, env)
    assert str(caught.value) == message


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            start_telemetry(["--metrics-address", f"127.0.0.1:{port}"], {})
    assert str(caught.value) == (
        f"command line: --metrics-address: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    )


