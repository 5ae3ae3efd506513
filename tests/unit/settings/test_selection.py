"""Choosing the node's config from a ConfigMap directory and the node label."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from settings import ConfigError
from settings.selection import Outcome, Selection, list_configs, select_config

NAMED = ("named", "single")


@pytest.mark.parametrize(
    ("available", "label", "default", "fallbacks", "current", "expected"),
    [
        pytest.param(["a", "b"], "b", "a", NAMED, None,
                     Selection("b", None, Outcome.LABEL), id="label-chooses"),
        pytest.param(["a", "b"], "b", "a", NAMED, "a",
                     Selection("b", None, Outcome.LABEL), id="label-switches"),
        pytest.param(["a", "..data", "..2024_01"], "..data", None, (), "a",
                     Selection("a", "specified config ..data does not exist; keeping a",
                               Outcome.KEPT), id="volume-internals-are-not-configs"),
        pytest.param(["a", "b"], "zzz", "a", NAMED, "b",
                     Selection("b", "specified config zzz does not exist; keeping b",
                               Outcome.KEPT), id="unknown-label-keeps-current"),
        pytest.param(["a", "b"], "zzz", "a", NAMED, None,
                     Selection("a", "specified config zzz does not exist; using default config a",
                               Outcome.DEFAULT), id="unknown-label-at-start-uses-default"),
        pytest.param(["a", "default"], "zzz", None, NAMED, None,
                     Selection("default", "specified config zzz does not exist; using the "
                               "config named 'default'", Outcome.FALLBACK),
                     id="unknown-label-at-start-falls-back"),
        pytest.param(["a", "b"], "zzz", None, NAMED, None,
                     Selection(None, "specified config zzz does not exist; no config was set, no "
                               "default was provided, and all fallbacks failed", Outcome.NONE),
                     id="unknown-label-at-start-nothing"),
        pytest.param(["a", "b"], None, "a", NAMED, "b",
                     Selection("a", "node label unset; using default config a", Outcome.DEFAULT),
                     id="unset-label-uses-default"),
        pytest.param(["a", "b"], "", "a", NAMED, None,
                     Selection("a", "node label unset; using default config a", Outcome.DEFAULT),
                     id="empty-label-is-unset"),
        pytest.param(["a"], None, "missing", NAMED, "a",
                     Selection("a", "default config missing does not exist; keeping a",
                               Outcome.KEPT), id="missing-default-keeps-current"),
        pytest.param(["a"], None, "missing", NAMED, None,
                     Selection(None, "default config missing does not exist", Outcome.NONE),
                     id="missing-default-at-start"),
        pytest.param(["a", "default"], None, None, NAMED, None,
                     Selection("default", "node label unset and no default config; using the "
                               "config named 'default'", Outcome.FALLBACK), id="fallback-named"),
        pytest.param(["only"], None, None, NAMED, None,
                     Selection("only", "node label unset and no default config; using 'only', "
                               "the only config", Outcome.FALLBACK), id="fallback-single"),
        pytest.param(["only"], None, None, ("single", "named"), None,
                     Selection("only", "node label unset and no default config; using 'only', "
                               "the only config", Outcome.FALLBACK), id="fallback-order"),
        pytest.param(["a", "b"], None, None, ("named", "single", "empty"), None,
                     Selection(None, "node label unset and no default config; using no config "
                               "file (empty fallback)", Outcome.FALLBACK), id="fallback-empty"),
        pytest.param([], None, None, ("empty",), None,
                     Selection(None, "no configuration files available", Outcome.NONE),
                     id="no-configs-even-with-empty-fallback"),
        pytest.param(["..data", "..2024_01"], "a", "a", NAMED, None,
                     Selection(None, "no configuration files available", Outcome.NONE),
                     id="only-volume-internals"),
        pytest.param([], "a", None, NAMED, "a",
                     Selection("a", "no configuration files available; keeping a",
                               Outcome.KEPT), id="emptied-directory-keeps-current"),
        pytest.param(["a", "b"], None, None, NAMED, "a",
                     Selection("a", "no config was set, no default was provided, and all "
                               "fallbacks failed; keeping a", Outcome.KEPT),
                     id="all-fallbacks-fail-keeps-current"),
        pytest.param(["a", "b"], None, None, (), None,
                     Selection(None, "no config was set, no default was provided, and all "
                               "fallbacks failed", Outcome.NONE), id="no-fallbacks"),
    ],
)  # fmt: skip
def test_select_config(
    available: list[str],
    label: str | None,
    default: str | None,
    fallbacks: tuple[str, ...],
    current: str | None,
    expected: Selection,
) -> None:
    selection = select_config(
        available=available,
        label_value=label,
        default_config=default,
        fallback_strategies=fallbacks,
        current=current,
    )
    assert selection == expected
    assert selection.usable is (expected.outcome is not Outcome.NONE)
    if selection.reason is not None:
        assert len(selection.reason.splitlines()) == 1


def test_an_unknown_fallback_strategy_is_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        select_config(
            available=["a", "b"],
            label_value=None,
            default_config=None,
            fallback_strategies=["first"],
            current=None,
        )
    assert str(caught.value) == "fallback strategies: unknown fallback strategy: first"


def _configmap_volume(root: Path, files: dict[str, str]) -> None:
    """The layout the kubelet gives a ConfigMap volume: ..data -> timestamped dir."""
    stamped = root / "..2024_06_01_00_00_00.123"
    stamped.mkdir()
    for name, text in files.items():
        (stamped / name).write_text(text, encoding="utf-8")
    os.symlink(stamped.name, root / "..data")
    for name in files:
        os.symlink(f"..data/{name}", root / name)


def test_list_configs_skips_the_volumes_own_entries_and_subdirectories(tmp_path: Path) -> None:
    _configmap_volume(tmp_path, {"config0": "version: v1\n", "t4-config": "version: v1\n"})
    (tmp_path / "subdir").mkdir()
    assert list_configs(tmp_path) == ["config0", "t4-config"]
    assert list_configs(str(tmp_path)) == ["config0", "t4-config"]


def test_a_missing_directory_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(ConfigError) as caught:
        list_configs(missing)
    assert str(caught.value) == (
        f"{missing}: error getting list of configuration files: "
        "error reading directory: No such file or directory"
    )


def test_selected_config_loads(tmp_path: Path) -> None:
    from settings import MigStrategy, load_config

    _configmap_volume(
        tmp_path,
        {
            "config0": "version: v1\nflags: {migStrategy: none}\n",
            "config1": "version: v1\nflags: {migStrategy: mixed}\n",
        },
    )
    flags = load_config(["--config-directory", str(tmp_path), "--default-config=config0"], {}).flags
    selection = select_config(
        available=list_configs(flags.config_directory),
        label_value="config1",
        default_config=flags.default_config,
        fallback_strategies=flags.fallback_strategies,
        current="config0",
    )
    assert selection.name == "config1"
    config = load_config([], {}, config_file=str(tmp_path / selection.name))
    assert config.flags.mig_strategy is MigStrategy.MIXED
