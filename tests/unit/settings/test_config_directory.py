"""ConfigDirectory: the one step from directory, label value and config in use to a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import ConfigError, load_config
from settings.selection import DEFAULT_FALLBACKS, ConfigDirectory, Outcome


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    (tmp_path / "a").write_text("version: v1\n")
    (tmp_path / "b").write_text("version: v1\n")
    (tmp_path / "..data").mkdir()
    return tmp_path


def test_built_from_the_plugin_flags(configs: Path) -> None:
    flags = load_config(
        ["--config-directory", str(configs), "--default-config", "a",
         "--fallback-strategies", "empty,named"], {}
    ).flags  # fmt: skip
    assert ConfigDirectory.of(flags) == ConfigDirectory(str(configs), "a", ("empty", "named"))
    assert ConfigDirectory.of(load_config([], {}).flags) is None


def test_raw_values_default_like_the_plugin(configs: Path) -> None:
    assert tuple(str(s) for s in load_config([], {}).flags.fallback_strategies) == DEFAULT_FALLBACKS
    assert ConfigDirectory.given(str(configs), "", None) == ConfigDirectory(
        str(configs), None, DEFAULT_FALLBACKS
    )


def test_label_default_and_kept(configs: Path) -> None:
    directory = ConfigDirectory(str(configs), default_config="a")
    by_label = directory.choose(label_value="b", current=None)
    assert (by_label.name, by_label.path, by_label.reason) == ("b", str(configs / "b"), None)
    by_default = directory.choose(label_value=None, current="b")
    assert by_default.selection.outcome is Outcome.DEFAULT
    assert by_default.reason == "node label unset; using default config a"
    kept = directory.choose(label_value="zzz", current="b")
    assert (kept.name, kept.selection.outcome) == ("b", Outcome.KEPT)


def test_empty_fallback_means_no_file(configs: Path) -> None:
    chosen = ConfigDirectory(str(configs), None, ("empty",)).choose(label_value=None, current=None)
    assert (chosen.name, chosen.path) == (None, "")


def test_nothing_usable_is_an_error_naming_the_directory(configs: Path) -> None:
    directory = ConfigDirectory(str(configs), None, ("named",))
    with pytest.raises(ConfigError) as caught:
        directory.choose(label_value=None, current=None)
    assert str(caught.value) == (
        f"{configs}: no config was set, no default was provided, and all fallbacks failed"
    )


def test_an_unknown_fallback_is_an_error_naming_it(configs: Path) -> None:
    directory = ConfigDirectory(str(configs), None, ("bogus",))
    with pytest.raises(ConfigError) as caught:
        directory.choose(label_value=None, current=None)
    assert str(caught.value) == "fallback strategies: unknown fallback strategy: bogus"


def test_unreadable_or_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="error reading directory"):
        ConfigDirectory(str(tmp_path / "absent")).choose(label_value=None, current=None)
    with pytest.raises(ConfigError, match="no configuration files available") as caught:
        ConfigDirectory(str(tmp_path)).choose(label_value="a", current=None)
    assert str(tmp_path) in str(caught.value)


@pytest.mark.parametrize("label", [None, "", "a", "b", "nope"])
@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"DEFAULT_CONFIG": "b"}, id="default"),
        pytest.param({"FALLBACK_STRATEGIES": "named,single"}, id="fallbacks-fail"),
        pytest.param({"FALLBACK_STRATEGIES": "empty"}, id="empty"),
    ],
)
@pytest.mark.parametrize("current", [None, "a"])
def test_plugin_labeller_and_mps_daemon_agree(
    configs: Path, label: str | None, env: dict[str, str], current: str | None
) -> None:
    """On one node the three binaries choose the same file, or fail alike."""
    from labels.flags import parse_arguments
    from labels.options import choose_config
    from mps.layout import CONTAINER_ROOT
    from mps.node_config import ConfigSource, load_daemon_config
    from reconciler.plan.inputs import ConfigInputs

    env = {"CONFIG_DIRECTORY": str(configs), **env}

    def plugin() -> str:
        loaded = ConfigInputs([], env).load(label, current)
        if loaded.error is not None:
            raise loaded.error
        return loaded.path

    def labeller() -> str:
        return choose_config(parse_arguments([], env), label_value=label, current=current).path

    def mps_daemon() -> str:
        source = ConfigSource({}, env, CONTAINER_ROOT, load_daemon_config({}, env, CONTAINER_ROOT))
        source.label_value, source.current = (lambda: label), current
        return source.load().config.config_path or ""

    answers: list[str] = []
    for choose in (plugin, labeller, mps_daemon):
        try:
            answers.append(choose())
        except ConfigError as error:
            answers.append(f"error: {error.problem}")
    assert answers[0] == answers[1] == answers[2], answers
