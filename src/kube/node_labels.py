"""Write a set of node labels under one prefix, removing the ones no longer produced.

The GPU feature labeller publishes its labels straight onto this node. Each
run produces the complete set it owns, so anything under its prefix that the
new set no longer contains is stale (a GPU was removed, MIG was turned off)
and is deleted. The change is one JSON merge patch: a null value removes a
key, other keys are set, labels outside the prefix are never touched.

Some keys under `nvidia.com/` belong to other components: the config label an
administrator sets to pick this node's configuration (which the plugin itself
watches), the MIG manager's request and state, the GPU operator's deploy
switches. Those prefixes are in `DEFAULT_KEEP` and are never swept; the
labeller can still set them explicitly if it produces them.

The patch carries the node's resourceVersion from the read, so a concurrent
writer makes it fail with 409 Conflict instead of being overwritten with a
stale view; the read-compute-patch is then retried a few times. Requests are
bounded by `timeout`; failures raise `KubeError`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from kube import raw
from kube.client import ApiAccess, close_client
from kube.errors import KubeError

DEFAULT_PREFIX = "nvidia.com/"
DEFAULT_KEEP: tuple[str, ...] = (
    "nvidia.com/device-plugin.config",
    "nvidia.com/mig.config",
    "nvidia.com/gpu.deploy.",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu-driver-upgrade",
)
_CONFLICT = 409


@dataclass(frozen=True)
class LabelChange:
    """What a call changed on the node (both empty when it was already up to date)."""

    set: Mapping[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.set or self.removed)


def patch_node_labels(
    api: ApiAccess,
    node_name: str,
    labels: Mapping[str, str | None],
    *,
    prefix: str = DEFAULT_PREFIX,
    keep: Collection[str] = DEFAULT_KEEP,
    timeout: float = 10.0,
    attempts: int = 3,
) -> LabelChange:
    """Make the node's labels under `prefix` equal `labels` (None values mean "absent").

    Every key in `labels` must start with `prefix`. Existing keys under the
    prefix that are not in `labels` are removed unless they start with one of
    `keep`. Nothing is sent when the node already matches.
    """
    if not prefix:
        raise ValueError("prefix must not be empty: it bounds what may be removed")
    outside = sorted(key for key in labels if not key.startswith(prefix))
    if outside:
        raise ValueError(f"labels outside the prefix {prefix!r}: {', '.join(outside)}")
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    bounds: raw.Timeout = (timeout, timeout)
    client = api.new_client()
    try:
        for attempt in range(1, attempts + 1):
            try:
                node = raw.read_node(client, node_name, timeout=bounds)
            except Exception as exc:
                raise KubeError.wrap(f"reading node {node_name}", exc) from exc
            change = _plan(raw.object_labels(node), labels, prefix=prefix, keep=keep)
            if not change.changed:
                return change
            body = _merge_patch(change, _resource_version(node))
            try:
                raw.merge_patch_node(client, node_name, body, timeout=bounds)
            except ApiException as exc:
                if exc.status == _CONFLICT and attempt < attempts:
                    continue  # someone else wrote the node meanwhile: re-read, re-plan
                raise KubeError.wrap(f"labelling node {node_name}", exc) from exc
            except Exception as exc:
                raise KubeError.wrap(f"labelling node {node_name}", exc) from exc
            return change
    finally:
        close_client(client)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _plan(
    current: Mapping[str, str],
    wanted: Mapping[str, str | None],
    *,
    prefix: str,
    keep: Collection[str],
) -> LabelChange:
    to_set = {
        key: value
        for key, value in sorted(wanted.items())
        if value is not None and current.get(key) != value
    }
    explicit_removals = {key for key, value in wanted.items() if value is None}
    stale = {
        key
        for key in current
        if key.startswith(prefix)
        and key not in wanted
        and not any(key.startswith(kept) for kept in keep)
    }
    removed = tuple(sorted(key for key in explicit_removals | stale if key in current))
    return LabelChange(set=to_set, removed=removed)


def _merge_patch(change: LabelChange, resource_version: str) -> raw.Json:
    labels: dict[str, str | None] = dict(change.set)
    labels.update(dict.fromkeys(change.removed))
    metadata: raw.Json = {"labels": labels}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def _resource_version(node: Mapping[str, object]) -> str:
    metadata = node.get("metadata")
    if isinstance(metadata, Mapping):
        return str(metadata.get("resourceVersion") or "")
    return ""
