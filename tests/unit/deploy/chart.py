"""Render the Helm chart with real Helm and pick rendered objects apart.

Shared by the deploy tests and by any test that needs exactly what the chart
hands the binaries (for example one that starts the real plugin with the
rendered environment). Helm runs in-process through helm-python-sdk, so no
`helm` binary is needed. Rendering is cached per values set: the cache key is
the values serialised as sorted JSON, and callers get deep copies so that one
test cannot change what another sees.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

from tests.unit.deploy.crds import MONITORING_GROUP, check_monitoring_object

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "charts" / "nvidia-device-plugin"
STATIC_DIR = REPO_ROOT / "charts" / "static"
CHART_VERSION = str(yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["version"])

RELEASE = "nvdp"
NAMESPACE = "nvidia-device-plugin"
FULLNAME = "nvdp-nvidia-device-plugin"

PLUGIN_CONTAINER = "nvidia-device-plugin-ctr"
GFD_CONTAINER = "gpu-feature-discovery-ctr"
MPS_CONTAINER = "mps-control-daemon-ctr"
MPS_MOUNT_CONTAINER = "mps-control-daemon-mounts"

Obj = dict[str, Any]


class RenderFailed(Exception):
    """Helm refused to render: a validation message or a schema violation."""


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


def freeze(values: Mapping[str, Any] | None) -> str:
    """A hashable, order-independent key for a values tree."""
    return json.dumps(values or {}, sort_keys=True)


@functools.lru_cache(maxsize=256)
def _render_cached(frozen: str, release: str, namespace: str) -> tuple[Obj, ...] | str:
    try:
        manifests = _chart().render(json.loads(frozen), name=release, namespace=namespace)
    except (helm.HelmRenderError, helm.HelmValuesError) as exc:
        return str(exc)
    objects: list[Obj] = []
    for path in sorted(manifests):
        if not path.endswith((".yml", ".yaml")):
            continue  # NOTES.txt
        objects.extend(doc for doc in yaml.safe_load_all(manifests[path]) if doc)
    return tuple(objects)


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Obj]:
    """Every object the chart renders for `values`; raises RenderFailed on refusal."""
    result = _render_cached(freeze(values), release, namespace)
    if isinstance(result, str):
        raise RenderFailed(result)
    return copy.deepcopy(list(result))


def render_error(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> str:
    """The message Helm fails with for `values`; AssertionError if it renders."""
    result = _render_cached(freeze(values), release, namespace)
    if not isinstance(result, str):
        raise AssertionError(f"expected the chart to refuse {values!r}, it rendered")
    return result


def render_notes(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> str:
    """The rendered NOTES.txt."""
    manifests = _chart().render(dict(values or {}), name=release, namespace=namespace)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def set_values(*expressions: str) -> dict[str, Any]:
    """Values as `helm ... --set e1 --set e2` builds them (later ones win)."""
    merged: dict[str, Any] = {}
    for expression in expressions:
        _deep_merge(merged, helm.parse_set_string(expression))
    return merged


def merge(*trees: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge values trees left to right, as repeated -f/--set flags do."""
    merged: dict[str, Any] = {}
    for tree in trees:
        _deep_merge(merged, copy.deepcopy(dict(tree)))
    return merged


def _deep_merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


# --- picking objects apart ------------------------------------------------------------


def find(objects: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """Objects of `kind` (and `name`, when given)."""
    return [
        obj
        for obj in objects
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]


def one(objects: Iterable[Obj], kind: str, name: str | None = None) -> Obj:
    """The single object of `kind` (and `name`); AssertionError otherwise."""
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds_and_names(objects: Iterable[Obj]) -> set[tuple[str, str]]:
    return {(obj["kind"], obj["metadata"]["name"]) for obj in objects}


def daemonset_with(objects: Iterable[Obj], container_name: str) -> Obj:
    """The DaemonSet whose pod runs a container (or init container) of that name."""
    for ds in find(objects, "DaemonSet"):
        spec = ds["spec"]["template"]["spec"]
        names = {c["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])}
        if container_name in names:
            return ds
    raise AssertionError(f"no DaemonSet runs a container named {container_name}")


def pod_spec(objects: Iterable[Obj], container_name: str) -> Obj:
    """The pod spec that runs `container_name`."""
    spec: Obj = daemonset_with(objects, container_name)["spec"]["template"]["spec"]
    return spec


def container(objects: Iterable[Obj], name: str) -> Obj:
    """A rendered container (or init container) by name."""
    spec = pod_spec(objects, name)
    for ctr in spec.get("containers", []) + spec.get("initContainers", []):
        if ctr["name"] == name:
            found: Obj = ctr
            return found
    raise AssertionError(f"no container named {name}")


def plugin_container(objects: Iterable[Obj]) -> Obj:
    """The device plugin's main container."""
    return container(objects, PLUGIN_CONTAINER)


def env_of(ctr: Obj) -> dict[str, Any]:
    """Container env as name -> value (a string) or the valueFrom mapping."""
    out: dict[str, Any] = {}
    for var in ctr.get("env") or []:
        out[var["name"]] = var["value"] if "value" in var else var.get("valueFrom")
    return out


def resolved_env(
    ctr: Obj, *, node_name: str, namespace: str = NAMESPACE, pod_name: str = "pod"
) -> dict[str, str]:
    """Container env as the kubelet would hand it over, downward-API fields filled in."""
    fields = {
        "spec.nodeName": node_name,
        "metadata.namespace": namespace,
        "metadata.name": pod_name,
    }
    out: dict[str, str] = {}
    for name, value in env_of(ctr).items():
        if isinstance(value, str):
            out[name] = value
        else:
            out[name] = fields[value["fieldRef"]["fieldPath"]]
    return out


def mounts_of(ctr: Obj) -> dict[str, Obj]:
    """Volume mounts by volume name."""
    return {m["name"]: m for m in ctr.get("volumeMounts") or []}


def volumes_of(spec: Obj) -> dict[str, Obj]:
    """Pod volumes by name."""
    return {v["name"]: v for v in spec.get("volumes") or []}


# --- schema validation ------------------------------------------------------------------

KUBERNETES_VERSION = kubernetes_validate.latest_version()
# The first release with DRA's resource.k8s.io/v1 (DeviceClass, ResourceSlice).
DRA_KUBERNETES_VERSION = "1.34.0"


@functools.lru_cache(maxsize=1024)
def _validate_frozen(frozen: str, version: str) -> None:
    kubernetes_validate.validate(json.loads(frozen), version, strict=True)


def validate(obj: Obj, version: str = KUBERNETES_VERSION) -> None:
    """Validate against a Kubernetes schema of kubernetes-validate (by default the newest).

    Strict mode: an unknown field is an error, so typos in templates are caught.
    Prometheus Operator objects, whose CRDs kubernetes-validate does not know,
    get the structural check of `tests.unit.deploy.crds` instead.
    Raises kubernetes_validate.ValidationError (or AssertionError for those).
    """
    if obj["apiVersion"].startswith(MONITORING_GROUP + "/"):
        check_monitoring_object(obj)
        return
    _validate_frozen(json.dumps(obj, sort_keys=True), version)
