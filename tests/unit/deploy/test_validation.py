"""Values the chart refuses: its validation messages and the values schema."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.chart import render, render_error
from tests.unit.deploy.seed import CONFIG0, CONFIG1

NAMESPACE_VALUE = (
    "\nValue 'namespace' set to gpu"
    "\nSetting an explicit 'namespace' in values.yaml or via --set on the command line is no "
    "longer supported."
    "\nUse --namespace (with --create-namespace as necessary) instead."
    "\nSee: https://helm.sh/docs/helm/helm_install/#options"
)
DEFAULT_NAMESPACE = (
    "\nRunning in the 'default' namespace is not recommended."
    "\nSet 'allowDefaultNamespace=true' to bypass this error."
    "\nOtherwise, use --namespace (with --create-namespace as necessary) to run in a specific "
    "namespace."
    "\nSee: https://helm.sh/docs/helm/helm_install/#options"
)
BOTH_CONFIGS = (
    "\nOnly one of 'config.name' or 'config.map' should ever be set for a given deployment."
    "\nUse 'config.name' to point to an external ConfigMap with a list of configurations."
    "\nUse 'config.map' to build an integrated ConfigMap from a set of configurations as part of "
    "this helm chart."
)


def no_default(fallbacks: str) -> str:
    return (
        "\nA default config must be provided when more than one configuration is set in "
        "'config.map'."
        "\nEither set the default using 'config.default' or provide a list of fallback "
        "strategies to try in 'config.fallbackStrategies'."
        "\nThe 'named' fallback will look for a 'config.map' entry with the special name "
        "'default'."
        "\nThe 'single' fallback will look to see if only a single config has been provided and "
        "make that the default."
        "\nThe 'empty' fallback will apply an empty config if none of the other fallbacks are "
        "successful."
        f"\nFallbacks are attempted in order and the current set is {fallbacks}."
    )


@pytest.mark.parametrize(
    ("values", "namespace", "message"),
    [
        pytest.param({"namespace": "gpu"}, "nvidia-device-plugin", NAMESPACE_VALUE, id="ns-value"),
        pytest.param({}, "default", DEFAULT_NAMESPACE, id="default-ns"),
        pytest.param(
            {"namespaceOverride": "gpu"}, "default", DEFAULT_NAMESPACE, id="default-ns-override"
        ),
        pytest.param(
            {"namespaceOverride": "default"}, "gpu", DEFAULT_NAMESPACE, id="override-to-default"
        ),
        pytest.param(
            {"config": {"name": "x", "map": {"a": CONFIG0}}},
            "nvidia-device-plugin",
            BOTH_CONFIGS,
            id="name-and-map",
        ),
        pytest.param(
            {"config": {"map": {"a": CONFIG0, "b": CONFIG1}}},
            "nvidia-device-plugin",
            no_default("[named single]"),
            id="two-without-default",
        ),
        pytest.param(
            {"config": {"map": {"a": CONFIG0}, "fallbackStrategies": ["named"]}},
            "nvidia-device-plugin",
            no_default("[named]"),
            id="one-without-single-fallback",
        ),
        pytest.param(
            {"config": {"map": {"a": CONFIG0, "b": CONFIG1}, "default": "c"}},
            "nvidia-device-plugin",
            "\nThe default config 'c' is not an entry of 'config.map'.\nSet 'config.default' to "
            "one of: a, b.",
            id="default-not-in-map",
        ),
    ],
)
def test_refused_with_message(values: dict[str, Any], namespace: str, message: str) -> None:
    error = render_error(values, namespace=namespace)
    assert "validation.yml" in error
    assert error.endswith(message)


@pytest.mark.parametrize(
    ("values", "namespace"),
    [
        pytest.param({"allowDefaultNamespace": True}, "default", id="default-ns-allowed"),
        pytest.param(
            {"allowDefaultNamespace": True, "namespaceOverride": "gpu"},
            "default",
            id="override-allowed",
        ),
        pytest.param({"config": {"map": {"a": CONFIG0}}}, "gpu", id="single-fallback"),
        pytest.param({"config": {"map": {"default": CONFIG0, "b": CONFIG1}}}, "gpu", id="named"),
        pytest.param(
            {"config": {"map": {"a": CONFIG0, "b": CONFIG1}, "fallbackStrategies": ["empty"]}},
            "gpu",
            id="empty-fallback",
        ),
        pytest.param(
            {"config": {"map": {"a": CONFIG0, "b": CONFIG1}, "default": "b"}}, "gpu", id="default"
        ),
        pytest.param({"config": {"name": "x", "default": "anything"}}, "gpu", id="external"),
    ],
)
def test_accepted(values: dict[str, Any], namespace: str) -> None:
    assert render(values, namespace=namespace)


@pytest.mark.parametrize(
    ("values", "path"),
    [
        pytest.param({"failOnInitError": "true"}, "/failOnInitError", id="bool-as-string"),
        pytest.param({"compatWithCPUManager": 1}, "/compatWithCPUManager", id="bool-as-int"),
        pytest.param({"migStrategy": "double"}, "/migStrategy", id="mig-choice"),
        pytest.param({"migStrategy": False}, "/migStrategy", id="mig-type"),
        pytest.param({"deviceListStrategy": "envvar,bogus"}, "/deviceListStrategy", id="dls"),
        pytest.param({"deviceIDStrategy": "serial"}, "/deviceIDStrategy", id="device-id"),
        pytest.param({"nvidiaDriverRoot": True}, "/nvidiaDriverRoot", id="driver-root"),
        pytest.param(
            {"config": {"fallbackStrategies": ["first"]}}, "/config/fallbackStrategies/0", id="fb"
        ),
        pytest.param({"config": {"map": {"a": {"version": "v1"}}}}, "/config/map/a", id="map"),
        pytest.param({"gfd": {"enabled": "yes"}}, "/gfd/enabled", id="gfd-enabled"),
        pytest.param({"gfd": {"sleepInterval": 60}}, "/gfd/sleepInterval", id="sleep-int"),
        pytest.param({"nfd": {"enabled": "no"}}, "/nfd/enabled", id="nfd-enabled"),
        pytest.param({"devicePlugin": {"enabled": "false"}}, "/devicePlugin/enabled", id="dp"),
        pytest.param(
            {"devicePlugin": {"inspection": {"port": "9040"}}},
            "/devicePlugin/inspection/port",
            id="port",
        ),
        pytest.param({"mps": {"root": "run/mps"}}, "/mps/root", id="mps-relative"),
        pytest.param({"resources": "small"}, "/resources", id="resources"),
        pytest.param({"tolerations": {"key": "x"}}, "/tolerations", id="tolerations"),
        pytest.param({"nodeSelector": {"pool": 1}}, "/nodeSelector/pool", id="node-selector"),
        pytest.param({"podAnnotations": {"a": True}}, "/podAnnotations/a", id="annotations"),
        pytest.param({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy", id="pull"),
        pytest.param({"allowDefaultNamespace": "true"}, "/allowDefaultNamespace", id="allow-ns"),
        pytest.param({"logFormat": "xml"}, "/logFormat", id="log-format"),
    ],
)
def test_schema_rejects_wrong_types(values: dict[str, Any], path: str) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert f"at '{path}'" in error
