"""The requests that write one `slice_plan.Plan`, and what a conflict means.

`SlicePublisher` plans against its watched copy (`slice_watch`) and hands
the plan here. Obsolete slices are deleted first, so a device that went away
is never offered meanwhile; then the updates (PUT with the resourceVersion
read) and the creates. What each request returns goes into the watched copy
at once (`observe`, `forget`), so the next plan starts from it.

A 409 Conflict, or an update of a slice deleted meanwhile (404), raises
`Conflict`: the publisher re-reads the slice (`refresh`) and plans again.
Any other failure is a `KubeError` of one line naming the action and the slice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kube import raw, resource_api, slice_plan
from kube.errors import KubeError
from kube.official import ApiClient, ApiException
from kube.slice_watch import SliceWatch

__all__ = ["CONFLICT", "Conflict", "apply", "refresh"]

CONFLICT = 409
_NOT_FOUND = 404


class Conflict(Exception):
    """Writing slice `name` met a newer version than the plan's: re-read it and plan again."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def apply(
    client: ApiClient, plan: slice_plan.Plan, watch: SliceWatch, timeout: raw.Timeout
) -> None:
    """Send the plan's deletes, updates and creates, in that order.

    Raises:
        Conflict: a slice changed (or went) since it was read.
        KubeError: any other failure (one line).
    """
    for name in plan.deletes:
        with _writing("deleting", name, watch):
            try:
                resource_api.delete_cluster_object(
                    client, raw.RESOURCE_SLICES, name, timeout=timeout
                )
            except ApiException as exc:
                if exc.status != _NOT_FOUND:
                    raise
            watch.forget(name)
    for body in plan.updates:
        name = raw.object_name(body)
        with _writing("updating", name, watch):
            updated = resource_api.replace_cluster_object(
                client, raw.RESOURCE_SLICES, name, body, timeout=timeout
            )
        watch.observe(updated)
    for body in plan.creates:
        name = raw.object_name(body)
        with _writing("creating", name, watch):
            created = resource_api.create_cluster_object(
                client, raw.RESOURCE_SLICES, body, timeout=timeout
            )
        watch.observe(created)


def refresh(client: ApiClient, name: str, watch: SliceWatch, timeout: raw.Timeout) -> None:
    """Re-read one slice after a conflict, so the next plan starts from the server's.

    Raises:
        KubeError: it could not be read, or it is no longer this driver's on this node.
    """
    try:
        obj = resource_api.get_cluster_object(client, raw.RESOURCE_SLICES, name, timeout=timeout)
    except Exception as exc:
        if isinstance(exc, ApiException) and exc.status == _NOT_FOUND:
            watch.forget(name)
            return
        raise KubeError.wrap(f"reading ResourceSlice {name}", exc) from exc
    if not watch.ours(obj):
        spec = raw.mapping_at(obj, "spec")
        raise KubeError(
            f"ResourceSlice {name} belongs to driver {spec.get('driver')} on node "
            f"{spec.get('nodeName')}: left alone"
        )
    watch.observe(obj)


@contextlib.contextmanager
def _writing(action: str, name: str, watch: SliceWatch) -> Iterator[None]:
    """Conflicts (and an update of a slice deleted meanwhile) plan again; the rest fails."""
    try:
        yield
    except ApiException as exc:
        if exc.status == CONFLICT:
            raise Conflict(name) from None
        if exc.status == _NOT_FOUND and action == "updating":
            watch.forget(name)  # the next plan creates it
            raise Conflict(name) from None
        raise KubeError.wrap(f"{action} ResourceSlice {name}", exc) from exc
    except Exception as exc:
        raise KubeError.wrap(f"{action} ResourceSlice {name}", exc) from exc
