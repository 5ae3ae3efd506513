"""`includeDevices` and `excludeDevices`: the same two variables for every component."""

from __future__ import annotations

from typing import Any

import pytest

from settings import load_config
from tests.unit.deploy.chart import (
    GFD_CONTAINER,
    MPS_CONTAINER,
    PLUGIN_CONTAINER,
    container,
    env_of,
    render,
    render_error,
)

COMPONENTS = (PLUGIN_CONTAINER, GFD_CONTAINER, MPS_CONTAINER)
ALL = {"gfd": {"enabled": True}}
UUID = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"


def envs(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    objects = render({**ALL, **values})
    return {name: env_of(container(objects, name)) for name in COMPONENTS}


def test_unset_values_render_no_variable() -> None:
    for name, env in envs({}).items():
        assert "INCLUDE_DEVICES" not in env, name
        assert "EXCLUDE_DEVICES" not in env, name


@pytest.mark.parametrize(
    ("values", "include", "exclude"),
    [
        pytest.param({"excludeDevices": f"3,{UUID}"}, None, f"3,{UUID}", id="string"),
        pytest.param(
            {"includeDevices": [0, 1, "0000:07:00.0"], "excludeDevices": [1]},
            "0,1,0000:07:00.0",
            "1",
            id="lists",
        ),
        pytest.param({"includeDevices": ""}, "", None, id="empty-string"),
    ],
)
def test_every_component_gets_the_same_lists(
    values: dict[str, Any], include: str | None, exclude: str | None
) -> None:
    for name, env in envs(values).items():
        assert env.get("INCLUDE_DEVICES") == include, name
        assert env.get("EXCLUDE_DEVICES") == exclude, name


def test_the_rendered_variables_are_what_the_binaries_read() -> None:
    env = envs({"includeDevices": [0, 1, "00000000:47:00.0"], "excludeDevices": "1"})
    plugin = env[PLUGIN_CONTAINER]
    config = load_config([], {k: v for k, v in plugin.items() if k.endswith("_DEVICES")})
    assert config.flags.include_devices == ("0", "1", "0000:47:00.0")
    assert config.flags.exclude_devices == ("1",)
    assert config.sources["exclude_devices"] == "env"


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"excludeDevices": {"gpu": 3}}, id="mapping"),
        pytest.param({"includeDevices": [True]}, id="boolean-item"),
        pytest.param({"includeDevices": 3}, id="bare-number"),
    ],
)
def test_schema_refuses_what_is_no_list(values: dict[str, Any]) -> None:
    assert "values don't meet the specifications of the schema" in render_error(values)
