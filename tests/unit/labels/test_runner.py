"""The labelling loop in-process: passes, reloads, stops, sinks and failures."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pytest

from labels.cli import serve
from labels.options import GfdOptions
from labels.output import LabelSink, format_labels, parse_labels
from labels.waiting import Wake
from tests.unit.labels.helpers import NOW, ScriptedWaiter, gpu_spec, write_profile


class Clock:
    def __init__(self, start: float = NOW) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


class RecordingSink:
    def __init__(self) -> None:
        self.published: list[dict[str, str]] = []
        self.withdrawn = 0

    def publish(self, labels: Mapping[str, str]) -> None:
        self.published.append(dict(labels))

    def withdraw(self) -> None:
        self.withdrawn += 1


def test_passes_share_one_timestamp_and_rewrite_the_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    clock = Clock()
    seen: list[dict[str, str]] = []

    def on_wait(index: int) -> None:
        seen.append(parse_labels(out.read_text()))
        out.unlink()  # every pass writes the file again, changed or not
        clock.now += 61

    waiter = ScriptedWaiter([Wake.TIMER, Wake.TIMER], on_wait)
    argv = ["--mock-nvml", "t4x4", "-o", str(out), "--machine-type-file", ""]
    assert serve(argv, {}, waiter, now=clock, configure_logging=False) == 0

    assert waiter.timeouts == [60.0, 60.0, 60.0]
    assert len(seen) == 3
    assert all(labels == seen[0] for labels in seen)
    assert seen[0]["nvidia.com/gfd.timestamp"] == str(NOW)
    assert seen[0]["nvidia.com/gpu.machine"] == "unknown"


def test_periodic_run_withdraws_its_labels_on_stop(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    present: list[bool] = []
    waiter = ScriptedWaiter([Wake.STOP], lambda index: present.append(out.exists()))
    argv = ["--mock-nvml", "t4x4", "-o", str(out)]
    assert serve(argv, {}, waiter, configure_logging=False) == 0
    assert present == [True]
    assert not out.exists()


def test_reload_takes_new_config_and_timestamp(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    clock = Clock()
    seen: list[dict[str, str]] = []

    def on_wait(index: int) -> None:
        seen.append(parse_labels(out.read_text()))
        if index == 0:
            config.write_text(
                "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                "    - {name: nvidia.com/gpu, replicas: 2}\n"
            )
            clock.now += 3600

    waiter = ScriptedWaiter([Wake.RELOAD], on_wait)
    argv = ["--mock-nvml", "dgx-h100", "-o", str(out), "--config-file", str(config)]
    assert serve(argv, {}, waiter, now=clock, configure_logging=False) == 0

    first, second = seen
    assert first["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert second["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert second["nvidia.com/gpu.replicas"] == "2"
    assert int(second["nvidia.com/gfd.timestamp"]) == NOW + 3600
    assert len(waiter.watched) == 2  # one config fingerprint per run


def test_watched_fingerprint_follows_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("version: v1\n")
    waiter = ScriptedWaiter()
    argv = ["--mock-nvml", "t4x4", "--oneshot", "-o", str(tmp_path / "gfd")]
    serve([*argv, "--config-file", str(config)], {}, waiter, configure_logging=False)
    (fingerprint,) = waiter.watched
    assert fingerprint is not None
    before = fingerprint()
    assert fingerprint() == before
    config.write_text("version: v1\nflags:\n  migStrategy: single\n")
    assert fingerprint() != before


def test_directory_fingerprint_follows_the_node_label(tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "a").write_text("version: v1\n")
    (configs / "b").write_text("version: v1\nflags:\n  migStrategy: single\n")
    label = {"value": "a"}
    waiter = ScriptedWaiter()
    argv = ["--mock-nvml", "t4x4", "--oneshot", "-o", str(tmp_path / "gfd")]
    env = {"CONFIG_DIRECTORY": str(configs)}
    code = serve(argv, env, waiter, label_value=lambda: label["value"], configure_logging=False)
    assert code == 0
    (fingerprint,) = waiter.watched
    assert fingerprint is not None
    before = fingerprint()
    label["value"] = "b"
    assert fingerprint() != before


def test_oneshot_labels_once_and_keeps_the_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    waiter = ScriptedWaiter()
    argv = ["--mock-nvml", "t4x4", "--oneshot", "-o", str(out)]
    assert serve(argv, {}, waiter, configure_logging=False) == 0
    assert waiter.timeouts == []
    assert parse_labels(out.read_text())["nvidia.com/gpu.count"] == "4"


def test_infinite_interval_waits_for_signals_and_keeps_the_file(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    waiter = ScriptedWaiter()
    env = {"GFD_SLEEP_INTERVAL": "infinite", "GFD_OUTPUT_FILE": str(out), "MOCK_NVML": "t4x4"}
    assert serve([], env, waiter, configure_logging=False) == 0
    assert waiter.timeouts == [math.inf]
    assert out.exists()


def test_hardware_changes_show_up_on_the_next_pass(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    profile = write_profile(tmp_path / "node.yaml", [gpu_spec(0)])
    counts: list[str] = []

    def on_wait(index: int) -> None:
        counts.append(parse_labels(out.read_text())["nvidia.com/gpu.count"])
        write_profile(profile, [gpu_spec(0), gpu_spec(1)])

    waiter = ScriptedWaiter([Wake.TIMER], on_wait)
    argv = ["--mock-nvml", str(profile), "-o", str(out)]
    assert serve(argv, {}, waiter, configure_logging=False) == 0
    assert counts == ["1", "2"]


def test_init_failure_allowed_labels_a_node_without_gpus(
    tmp_path: Path, logs: list[tuple[str, str]]
) -> None:
    out = tmp_path / "gfd"
    argv = ["--mock-nvml", "nvml-broken", "--oneshot", "-o", str(out)]
    code = serve(
        [*argv, "--fail-on-init-error=false"],
        {},
        ScriptedWaiter(),
        now=Clock(),
        configure_logging=False,
    )
    assert code == 0
    assert parse_labels(out.read_text()) == {
        "nvidia.com/gfd.timestamp": str(NOW),
        "nvidia.com/vgpu.present": "false",
    }
    assert any(level == "WARNING" and "without GPUs" in text for level, text in logs)


def test_init_failure_is_fatal_by_default(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    out = tmp_path / "gfd"
    argv = ["--mock-nvml", "nvml-broken", "--oneshot", "-o", str(out)]
    assert serve(argv, {}, ScriptedWaiter(), configure_logging=False) == 1
    assert not out.exists()
    assert (
        "ERROR",
        "gpu-feature-discovery: failed to start the device library: "
        "NVML could not start: RM has detected an NVML/RM version mismatch.",
    ) in logs


def test_failed_pass_exits_1_and_withdraws(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    out = tmp_path / "gfd"
    profile = write_profile(tmp_path / "node.yaml", [gpu_spec(0)])

    def on_wait(index: int) -> None:
        assert out.exists()
        write_profile(profile, [gpu_spec(0)], driverVersion="550")

    waiter = ScriptedWaiter([Wake.TIMER], on_wait)
    argv = ["--mock-nvml", str(profile), "-o", str(out)]
    assert serve(argv, {}, waiter, configure_logging=False) == 1
    assert not out.exists()
    assert (
        "ERROR",
        "gpu-feature-discovery: driver version '550' does not match format X.Y[.Z]",
    ) in logs


def test_empty_output_file_prints_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--mock-nvml", "t4x4", "--oneshot", "--no-timestamp", "--output-file="]
    assert serve(argv, {}, ScriptedWaiter(), configure_logging=False) == 0
    printed = capsys.readouterr().out
    labels = parse_labels(printed)
    assert printed == format_labels(labels)
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert "nvidia.com/gfd.timestamp" not in labels


def test_node_feature_api_without_a_sink_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gfd"
    env = {"GFD_USE_NODE_FEATURE_API": "true"}
    argv = ["--mock-nvml", "t4x4", "--oneshot", "-o", str(out)]
    assert serve(argv, env, ScriptedWaiter(), configure_logging=False) == 1
    assert capsys.readouterr().err == (
        "gpu-feature-discovery: environment: --use-node-feature-api: publishing a NodeFeature "
        "object is not available; set --use-node-feature-api=false to write the features file\n"
    )
    assert not out.exists()


def test_api_sinks_plug_in(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    out = tmp_path / "gfd"
    feature, node = RecordingSink(), RecordingSink()
    received: list[GfdOptions] = []

    def feature_sink(options: GfdOptions) -> LabelSink:
        received.append(options)
        return feature

    argv = ["--mock-nvml", "t4x4", "-o", str(out), "--node-name", "node-1"]
    env = {"GFD_USE_NODE_FEATURE_API": "true", "GFD_WRITE_NODE_LABELS": "true"}
    code = serve(
        argv,
        env,
        ScriptedWaiter([Wake.TIMER]),
        node_feature=feature_sink,
        node_labels=lambda options: node,
        configure_logging=False,
    )
    assert code == 0
    assert not out.exists()  # the NodeFeature object replaces the file
    assert received[0].node_name == "node-1"
    assert len(feature.published) == 2
    assert node.published == feature.published
    assert (feature.withdrawn, node.withdrawn) == (1, 1)

    # Without the Kubernetes layer, node labels are skipped with a warning only.
    assert serve(["--mock-nvml", "t4x4", "--oneshot", "-o", str(out)], env | {
        "GFD_USE_NODE_FEATURE_API": "false"
    }, ScriptedWaiter(), configure_logging=False) == 0  # fmt: skip
    assert out.exists()
    assert any(level == "WARNING" and "Node object" in text for level, text in logs)


def test_the_chart_environment_is_accepted(tmp_path: Path, logs: list[tuple[str, str]]) -> None:
    configs = tmp_path / "available-configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\nflags:\n  migStrategy: none\n")
    out = tmp_path / "gfd"
    # What templates/daemonset-gfd.yml sets (plus the simulated backend and paths).
    env = {
        "NODE_NAME": "node-1",
        "NAMESPACE": "gpu-operator",
        "POD_NAME": "nvdp-gpu-feature-discovery-abcde",
        "MIG_STRATEGY": "single",
        "FAIL_ON_INIT_ERROR": "true",
        "GFD_NO_TIMESTAMP": "true",
        "GFD_SLEEP_INTERVAL": "60s",
        "CONFIG_DIRECTORY": str(configs),
        "DEFAULT_CONFIG": "default",
        "FALLBACK_STRATEGIES": "named,single",
        "NODE_LABEL": "nvidia.com/device-plugin.config",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
        "DEVICE_DISCOVERY_STRATEGY": "auto",
        "GFD_USE_NODE_FEATURE_API": "false",
        "GFD_WRITE_NODE_LABELS": "false",
        "LOG_FORMAT": "json",
        "MOCK_NVML": "a100-mig-single",
        "GFD_OUTPUT_FILE": str(out),
    }
    seen: list[dict[str, str]] = []
    waiter = ScriptedWaiter([], lambda index: seen.append(parse_labels(out.read_text())))
    assert serve([], env, waiter, configure_logging=False) == 0
    assert seen[0]["nvidia.com/mig.strategy"] == "single"  # the flag beats the file
    assert "nvidia.com/gfd.timestamp" not in seen[0]
    assert waiter.timeouts == [60.0]
    assert not any(level in ("WARNING", "ERROR") for level, _ in logs)
