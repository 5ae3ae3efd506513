"""The MPS daemon's config: the plugin's selection from a directory, and what needs a restart."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from mps.layout import CONTAINER_ROOT
from mps.node_config import ConfigSource, Loaded, daemon_inputs, follow_label, load_daemon_config
from mps.service import LABEL_CHANGED, Event, _first_label, _reselect
from settings import ConfigError, SetValue

from .helpers import write_config

ROOT = CONTAINER_ROOT
NONE: dict[str, SetValue] = {}


@pytest.fixture
def logs() -> Iterator[list[str]]:
    records: list[str] = []
    handler = logger.add(lambda m: records.append(m.record["message"]), level="DEBUG")
    try:
        yield records
    finally:
        logger.remove(handler)


def directory(tmp_path: Path, **replicas: int) -> Path:
    path = tmp_path / "configs"
    path.mkdir()
    for name, count in replicas.items():
        write_config(path / name, replicas=count)
    return path


def source(env: dict[str, str], label: str | None = None) -> ConfigSource:
    boot = load_daemon_config(NONE, env, ROOT)
    made = ConfigSource(NONE, env, ROOT, boot)
    made.label_value = lambda: label
    return made


def replicas(loaded: Loaded) -> int:
    return loaded.config.sharing.resources[0].replicas


def test_directory_selects_by_label_then_default(tmp_path: Path, logs: list[str]) -> None:
    configs = directory(tmp_path, two=2, four=4)
    env = {"CONFIG_DIRECTORY": str(configs), "DEFAULT_CONFIG": "four"}

    by_default = source(env).load()
    assert (by_default.name, replicas(by_default)) == ("four", 4)
    assert "config selection: node label unset; using default config four" in logs

    by_label = source(env, "two").load()
    assert (by_label.name, replicas(by_label)) == ("two", 2)
    assert by_label.config.config_path == str(configs / "two")


def test_config_file_is_ignored_when_a_directory_is_given(tmp_path: Path) -> None:
    """As in the plugin: CONFIG_DIRECTORY wins, whatever CONFIG_FILE says."""
    configs = directory(tmp_path, only=3)
    stray = write_config(tmp_path / "stray.yaml", replicas=7)
    loaded = source({"CONFIG_DIRECTORY": str(configs), "CONFIG_FILE": str(stray)}).load()
    assert (loaded.name, replicas(loaded)) == ("only", 3)


def test_plain_config_file_without_a_directory(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", replicas=5)
    loaded = source({"CONFIG_FILE": str(config)}, "ignored").load()
    assert (loaded.name, replicas(loaded)) == (None, 5)


def test_the_start_up_read_answers_the_first_load_only(tmp_path: Path) -> None:
    """The file is not read again for the first pass; a later one (SIGHUP) reads it afresh."""
    config = write_config(tmp_path / "config.yaml", replicas=5)
    env = {"CONFIG_FILE": str(config)}
    boot = load_daemon_config(NONE, env, ROOT)
    made = ConfigSource(NONE, env, ROOT, boot)
    write_config(config, replicas=6)
    assert made.load().config is boot
    assert replicas(made.load()) == 6


def test_unknown_label_keeps_the_config_in_use(tmp_path: Path, logs: list[str]) -> None:
    configs = directory(tmp_path, two=2, four=4)
    running = source({"CONFIG_DIRECTORY": str(configs)}, "two")
    running.accept(running.load())
    running.label_value = lambda: "nope"
    kept = running.load()
    assert kept.name == "two"
    assert "config selection: specified config nope does not exist; keeping two" in logs


def test_empty_fallback_runs_without_a_file(tmp_path: Path) -> None:
    configs = directory(tmp_path, a=2, b=4)
    loaded = source({"CONFIG_DIRECTORY": str(configs), "FALLBACK_STRATEGIES": "empty"}).load()
    assert loaded.name is None
    assert loaded.config.config_path in (None, "")
    assert daemon_inputs(loaded.config) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({"FALLBACK_STRATEGIES": "named"},
                     "no config was set, no default was provided, and all fallbacks failed",
                     id="nothing-selected"),
        pytest.param({"DEFAULT_CONFIG": "missing"}, "default config missing does not exist",
                     id="missing-default"),
    ],
)  # fmt: skip
def test_nothing_usable_is_a_config_error(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    configs = directory(tmp_path, a=2, b=4)
    with pytest.raises(ConfigError, match=message):
        source({"CONFIG_DIRECTORY": str(configs), **env}).load()


def test_unreadable_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="error getting list of configuration files"):
        source({"CONFIG_DIRECTORY": str(tmp_path / "absent")}).load()


def test_daemon_inputs_ignore_what_only_the_plugin_reads(tmp_path: Path) -> None:
    base = write_config(tmp_path / "base.yaml", replicas=4)
    ids = tmp_path / "ids.yaml"
    ids.write_text("flags:\n  plugin:\n    deviceIDStrategy: index\n" + base.read_text())
    more = write_config(tmp_path / "more.yaml", replicas=8)
    renamed = write_config(
        tmp_path / "renamed.yaml", replicas=4, extra="    renameByDefault: true\n"
    )
    sliced = write_config(tmp_path / "sliced.yaml", replicas=4, section="timeSlicing")

    def inputs(path: Path) -> object:
        return daemon_inputs(load_daemon_config(NONE, {"CONFIG_FILE": str(path)}, ROOT))

    assert inputs(base) == inputs(ids)
    assert inputs(base) != inputs(more)
    assert inputs(base) != inputs(renamed)
    assert inputs(sliced) is None
    assert inputs(base) is not None


async def test_reselect_restarts_only_for_other_daemons(
    tmp_path: Path, logs: list[str]
) -> None:
    configs = directory(tmp_path, two=2, four=4)
    (configs / "two-index").write_text(
        "flags:\n  plugin:\n    deviceIDStrategy: index\n" + (configs / "two").read_text()
    )
    (configs / "broken").write_text("version: v1\nsharing: [\n")
    label = {"value": "two"}
    chooser = source({"CONFIG_DIRECTORY": str(configs)})
    chooser.label_value = lambda: label["value"]
    running = chooser.load()
    chooser.accept(running)

    label["value"] = "two-index"
    restart, running = await _reselect(chooser, running)
    assert not restart
    assert running.name == chooser.current == "two-index"
    assert "config two-index needs the same MPS daemons; they keep running" in logs

    label["value"] = "broken"
    restart, still = await _reselect(chooser, running)
    assert not restart
    assert still is running
    assert chooser.current == "two-index"
    assert "keeping the running MPS daemons and their config" in logs

    label["value"] = "four"
    restart, _ = await _reselect(chooser, running)
    assert restart
    assert "config four changes the MPS daemons; restarting them" in logs


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param({}, "per-node config selection is off: no --node-name (NODE_NAME) given",
                     id="no-node-name"),
        pytest.param({"NODE_NAME": "n1"},
                     "per-node config selection is off: no Kubernetes API access "
                     "(not in a cluster and no KUBECONFIG)", id="no-access"),
        pytest.param({"NODE_NAME": "n1", "KUBECONFIG": "/nonexistent/kubeconfig"},
                     "per-node config selection is off: cannot load kubeconfig "
                     "/nonexistent/kubeconfig", id="broken-access"),
    ],
)  # fmt: skip
def test_without_node_name_or_access_the_label_is_unset(
    tmp_path: Path, logs: list[str], env: dict[str, str], message: str
) -> None:
    configs = directory(tmp_path, only=2)
    boot = load_daemon_config(NONE, {"CONFIG_DIRECTORY": str(configs), **env}, ROOT)
    assert follow_label(boot, env, lambda _: None) is None
    said = [line for line in logs if "per-node config selection is off" in line]
    assert len(said) == 1
    assert said[0].startswith(message)


def test_no_directory_follows_nothing(tmp_path: Path, logs: list[str]) -> None:
    boot = load_daemon_config(NONE, {"NODE_NAME": "n1", "KUBECONFIG": "/x"}, ROOT)
    assert follow_label(boot, {"NODE_NAME": "n1", "KUBECONFIG": "/x"}, lambda _: None) is None
    assert logs == []


async def test_first_label_wait(logs: list[str]) -> None:
    """Start-up waits for the label's first read, a stop signal, or `--label-wait`."""
    queue: asyncio.Queue[Event] = asyncio.Queue()
    assert await _first_label(queue, 0) is None  # 0: no wait, and nothing to warn about
    assert not any("no answer" in line for line in logs)
    assert await _first_label(queue, 0.05) is None
    assert "no answer from the Kubernetes API within 0.05s; starting without the node label" in logs
    queue.put_nowait(signal.SIGHUP)  # not a stop: keeps waiting
    queue.put_nowait(LABEL_CHANGED)
    assert await _first_label(queue, 5) is None
    queue.put_nowait(signal.SIGTERM)
    assert await _first_label(queue, 5) is signal.SIGTERM
