"""Every install command users run works with the chart unchanged.

Two sources: the reference README's `helm upgrade -i` commands (as values, in
`seed.py`) and the commands of our deployment guide, executed through Helm's own
flag parsers. Each must render, and every object must pass the Kubernetes
schema of the newest version kubernetes-validate ships.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.chart import (
    GFD_CONTAINER,
    PLUGIN_CONTAINER,
    REPO_ROOT,
    container,
    env_of,
    find,
    one,
    render,
    set_values,
    validate,
)
from tests.unit.deploy.helm_cli import HelmInstall, heredocs, installs
from tests.unit.deploy.seed import (
    CONFIG0,
    CONFIG1,
    SEED_INSTALLS,
    SEED_SET_FLAGS,
    seed,
    seed_params,
)

GUIDE = REPO_ROOT / "docs" / "deployment.md"


@pytest.fixture(scope="module")
def guide_installs(tmp_path_factory: pytest.TempPathFactory) -> list[HelmInstall]:
    return installs(GUIDE.read_text(), tmp_path_factory.mktemp("guide"))


@pytest.mark.parametrize(("namespace", "values"), seed_params())
def test_seed_readme_install_renders_valid_objects(namespace: str, values: dict[str, Any]) -> None:
    objects = render(values, namespace=namespace)
    assert find(objects, "DaemonSet"), "every README install deploys at least one DaemonSet"
    for obj in objects:
        validate(obj)


def _comparable(values: dict[str, Any]) -> dict[str, Any]:
    """Values with config files compared by content, not by comments and layout."""
    out = copy.deepcopy(values)
    files = out.get("config", {}).get("map", {})
    for key, text in files.items():
        files[key] = yaml.safe_load(text)
    return out


@pytest.mark.parametrize(("namespace", "values"), seed_params())
def test_guide_carries_every_seed_readme_install(
    guide_installs: list[HelmInstall], namespace: str, values: dict[str, Any]
) -> None:
    assert any(
        i.namespace == namespace and _comparable(i.values) == _comparable(values)
        for i in guide_installs
    ), "docs/deployment.md lacks this README install"


def test_guide_example_files_are_the_readme_files() -> None:
    files = heredocs(GUIDE.read_text())
    assert yaml.safe_load(files["/tmp/dp-example-config0.yaml"]) == yaml.safe_load(CONFIG0)
    assert yaml.safe_load(files["/tmp/dp-example-config1.yaml"]) == yaml.safe_load(CONFIG1)


def test_guide_installs_all_render_valid_objects(guide_installs: list[HelmInstall]) -> None:
    assert len(guide_installs) >= len(SEED_INSTALLS)
    for install in guide_installs:
        objects = render(install.values, release=install.release, namespace=install.namespace)
        for obj in objects:
            validate(obj)


def test_set_file_reads_the_config_into_the_chart_configmap(tmp_path: Path) -> None:
    install = next(
        i for i in installs(GUIDE.read_text(), tmp_path) if "config.map.config=" in i.command
    )
    cm = one(render(install.values, release=install.release), "ConfigMap")
    assert yaml.safe_load(cm["data"]["config"]) == yaml.safe_load(CONFIG0)


def test_multiple_configs_select_config0_by_default() -> None:
    _, values = seed("multiple-config-files")
    objects = render(values)
    env = env_of(container(objects, PLUGIN_CONTAINER))
    assert env["DEFAULT_CONFIG"] == "config0"
    assert set(one(objects, "ConfigMap")["data"]) == {"config0", "config1"}


def test_gfd_standalone_deploys_only_gfd() -> None:
    namespace, values = seed("gfd-standalone-default-namespace")
    objects = render(values, namespace=namespace)
    (ds,) = find(objects, "DaemonSet")
    assert ds["metadata"]["name"] == "nvdp-nvidia-device-plugin-gpu-feature-discovery"
    env = env_of(container(objects, GFD_CONTAINER))
    assert env["MIG_STRATEGY"] == "mixed"
    # The reference's nfd.enabled=false meant "NFD is installed on its own":
    # GFD writes the features file for it and needs no access to nodes.
    assert env["GFD_WRITE_NODE_LABELS"] == "false"
    assert not find(objects, "ClusterRole")


@pytest.mark.parametrize("case", sorted(SEED_SET_FLAGS))
def test_seed_values_are_what_helm_builds_from_the_readme_flags(case: str) -> None:
    assert set_values(*SEED_SET_FLAGS[case]) == seed(case)[1]
