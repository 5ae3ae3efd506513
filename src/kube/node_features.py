"""The labeller's labels as an NFD `NodeFeature` object (`--use-node-feature-api`).

Node Feature Discovery's master turns NodeFeature objects
(`nfd.k8s-sigs.io/v1alpha1`) into node labels. The object GFD writes follows
the reference exactly:

- name `nvidia-features-for-<node>`, in the labeller's own namespace;
- one metadata label, `nfd.node.kubernetes.io/node-name: <node>`, which is
  how nfd-master finds the node the object describes (it replaces any other
  labels on update);
- `spec.features` with empty `flags`, `attributes` and `instances`, and
  `spec.labels` with the whole label set;
- owner references to the DaemonSet and the Pod when the Pod (`POD_NAME`)
  is owned by a DaemonSet, so garbage collection removes the object with the
  DaemonSet. GFD itself never deletes it.

What differs is the traffic. The reference GETs the object every pass; here a
watch keeps a copy (`object_watch`), each pass's desired object is compared
with it semantically (missing and empty maps are equal), and only a
difference costs a request: CREATE when the object is absent, UPDATE (PUT,
carrying the resourceVersion) when it differs. A conflict (409) is answered
with a fresh GET and another attempt after a short jittered pause; a Pod
lookup that fails keeps the owner references the object already has instead
of stripping them. Every failure is one line in a `KubeError`.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kube import raw
from kube.client import ApiAccess
from kube.errors import KubeError
from kube.official import ApiClient, ApiException
from kube.pacing import DEFAULT_WATCH_TIMEOUTS, REAL_TIME, Clock, WatchTimeouts
from kube.watched_writer import WatchedWriter

__all__ = [
    "NODE_NAME_LABEL",
    "NodeFeaturePublisher",
    "Outcome",
    "desired_object",
    "object_name",
    "owner_references",
    "same_object",
]

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
_PREFIX = "nvidia-features-for-"
_FEATURE_MAPS = ("flags", "attributes", "instances")
_NOT_FOUND = 404
_CONFLICT = 409


class Outcome(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


def object_name(node_name: str) -> str:
    return f"{_PREFIX}{node_name}"


def desired_object(
    node_name: str,
    namespace: str,
    labels: Mapping[str, str],
    owners: Sequence[Mapping[str, Any]],
) -> raw.Json:
    """The NodeFeature object the labeller wants, as the reference builds it."""
    metadata: raw.Json = {
        "name": object_name(node_name),
        "namespace": namespace,
        "labels": {NODE_NAME_LABEL: node_name},
    }
    if owners:
        metadata["ownerReferences"] = [dict(owner) for owner in owners]
    return {
        "apiVersion": f"{raw.NFD_GROUP}/{raw.NFD_VERSION}",
        "kind": "NodeFeature",
        "metadata": metadata,
        "spec": {
            "features": {name: {} for name in _FEATURE_MAPS},
            "labels": dict(labels),
        },
    }


def same_object(current: Mapping[str, Any], desired: Mapping[str, Any], *, owners: bool) -> bool:
    """Whether `current` already says what `desired` says (nil and empty maps are equal).

    With `owners=False` the owner references are not compared (they could not
    be looked up, and the current ones are kept).
    """
    if raw.object_labels(current) != raw.object_labels(desired):
        return False
    if _spec(current) != _spec(desired):
        return False
    return not owners or _owners(current) == _owners(desired)


def owner_references(
    client: ApiClient, namespace: str, pod_name: str, *, timeout: raw.Timeout
) -> list[raw.Json]:
    """[DaemonSet (controller), Pod] when the Pod is owned by a DaemonSet, else [].

    Raises:
        KubeError: the Pod could not be read; `status` 404 when it does not exist.
    """
    try:
        pod = raw.read_pod(client, namespace, pod_name, timeout=timeout)
    except Exception as exc:
        raise KubeError.wrap(f"reading pod {namespace}/{pod_name}", exc) from exc
    metadata = raw.object_metadata(pod)
    refs = metadata.get("ownerReferences") or []
    daemonset = next(
        (ref for ref in refs if isinstance(ref, Mapping) and ref.get("kind") == "DaemonSet"), None
    )
    if daemonset is None:
        return []
    return [
        {
            "apiVersion": str(daemonset.get("apiVersion") or "apps/v1"),
            "kind": "DaemonSet",
            "name": str(daemonset.get("name") or ""),
            "uid": str(daemonset.get("uid") or ""),
            "controller": True,
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": str(metadata.get("name") or pod_name),
            "uid": str(metadata.get("uid") or ""),
        },
    ]


class NodeFeaturePublisher(WatchedWriter):
    """Keeps `nvidia-features-for-<node>` in `namespace` equal to each pass's labels.

    `apply` is called from one thread (the labelling loop); the watch runs in
    its own. Until the first list has succeeded (`sync_timeout` on the first
    call), and after a conflict, the object is read with a GET instead.
    """

    def __init__(
        self,
        api: ApiAccess,
        *,
        node_name: str,
        namespace: str,
        pod_name: str = "",
        timeout: float = 10.0,
        attempts: int = 3,
        sync_timeout: float = 3.0,
        on_error: Callable[[str], None] | None = None,
        watch_timeouts: WatchTimeouts = DEFAULT_WATCH_TIMEOUTS,
        clock: Clock = REAL_TIME,
        rng: random.Random | None = None,
    ) -> None:
        if not node_name:
            raise ValueError("the NodeFeature object needs the node's name")
        if not namespace:
            raise ValueError("the NodeFeature object needs a namespace")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._collection = raw.node_features(namespace)
        self._name = object_name(node_name)
        super().__init__(
            api,
            collection=self._collection,
            name=self._name,
            thread_name="gfd-nodefeature-watch",
            sync_timeout=sync_timeout,
            on_error=on_error,
            watch_timeouts=watch_timeouts,
            clock=clock,
            rng=rng,
        )
        self._node = node_name
        self._namespace = namespace
        self._pod = pod_name
        self._timeout = timeout
        self._attempts = attempts
        self._on_error = on_error
        self._what = self._collection.describe(self._name)
        # None: not known (yet, or the lookup failed); [] or two refs once known.
        self._owners: list[raw.Json] | None = None if pod_name else []
        self._looked_up = False

    @property
    def name(self) -> str:
        return self._name

    def apply(self, labels: Mapping[str, str]) -> Outcome:
        """Create or update the object when it differs from `labels`; never deletes it.

        Raises:
            KubeError: reading or writing the object failed (one line).
        """
        client = self._connected()
        retry_lookup = self._looked_up
        if not self._looked_up and self._owners is None:
            self._look_up_owners(client)
        current = self._watch.current() if self._synced() else self._get(client)
        for attempt in range(1, self._attempts + 1):
            write_due = current is None or not self._matches(current, labels)
            if retry_lookup and self._owners is None and write_due:
                retry_lookup = False
                self._look_up_owners(client)  # it failed before; a write is due anyway
            desired = desired_object(self._node, self._namespace, labels, self._owners or [])
            try:
                if current is None:
                    written = self._create(client, desired)
                    outcome = Outcome.CREATED
                elif same_object(current, desired, owners=self._owners is not None):
                    return Outcome.UNCHANGED
                else:
                    written = self._replace(client, current, desired)
                    outcome = Outcome.UPDATED
            except ApiException as exc:
                if exc.status not in (_CONFLICT, _NOT_FOUND) or attempt == self._attempts:
                    raise self._error(current is None, exc) from exc
                if current is None and exc.status == _NOT_FOUND:
                    raise self._error(True, exc) from exc  # no such resource: the CRD is missing
                # 409: someone wrote it meanwhile (or it exists already); 404: it was
                # deleted meanwhile. Either way, read it again and re-plan.
                self._pause(attempt)
                current = self._get(client)
                continue
            except Exception as exc:
                raise self._error(current is None, exc) from exc
            self._watch.observe(written)
            return outcome
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _matches(self, current: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        desired = desired_object(self._node, self._namespace, labels, [])
        return same_object(current, desired, owners=False)

    def _bounds(self) -> raw.Timeout:
        seconds = self._timeout
        return (seconds, seconds)

    def _look_up_owners(self, client: ApiClient) -> None:
        self._looked_up = True
        try:
            self._owners = owner_references(
                client, self._namespace, self._pod, timeout=self._bounds()
            )
        except KubeError as err:
            if err.status == _NOT_FOUND:
                self._owners = []  # as the reference: no such pod, no owners
            self._warn(f"{err}; the {self._what} gets no new owner references")

    def _get(self, client: ApiClient) -> raw.Json | None:
        try:
            return raw.get_object(client, self._collection, self._name, timeout=self._bounds())
        except ApiException as exc:
            if exc.status == _NOT_FOUND and _object_missing(exc):
                return None
            raise _with_hint(KubeError.wrap(f"reading {self._what}", exc)) from exc
        except Exception as exc:
            raise KubeError.wrap(f"reading {self._what}", exc) from exc

    def _create(self, client: ApiClient, desired: raw.Json) -> raw.Json:
        return raw.create_object(client, self._collection, desired, timeout=self._bounds())

    def _replace(
        self, client: ApiClient, current: Mapping[str, Any], desired: raw.Json
    ) -> raw.Json:
        body = copy.deepcopy(dict(current))
        metadata = body.setdefault("metadata", {})
        metadata["labels"] = desired["metadata"]["labels"]
        if self._owners is not None:
            if self._owners:
                metadata["ownerReferences"] = desired["metadata"]["ownerReferences"]
            else:
                metadata.pop("ownerReferences", None)
        body["spec"] = desired["spec"]
        return raw.replace_object(
            client, self._collection, self._name, body, timeout=self._bounds()
        )

    def _error(self, creating: bool, exc: BaseException) -> KubeError:
        action = f"creating {self._what}" if creating else f"updating {self._what}"
        error = KubeError.wrap(action, exc)
        return _with_hint(error) if creating else error

    def _warn(self, message: str) -> None:
        if self._on_error is not None:
            # The reporter must not break publishing.
            with contextlib.suppress(Exception):
                self._on_error(message)


def _spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with missing and empty maps made equal, for comparison."""
    spec = raw.mapping_at(obj, "spec")
    features = raw.mapping_at(spec, "features")
    normal: dict[str, Any] = {
        key: value for key, value in spec.items() if key not in ("features", "labels") and value
    }
    normal["features"] = {
        key: dict(value) if isinstance(value, Mapping) else value
        for key, value in features.items()
        if value
    }
    normal["labels"] = dict(raw.mapping_at(spec, "labels"))
    return normal


def _owners(obj: Mapping[str, Any]) -> list[tuple[str, str, str, str, bool]]:
    return [
        (
            str(ref.get("apiVersion") or ""),
            str(ref.get("kind") or ""),
            str(ref.get("name") or ""),
            str(ref.get("uid") or ""),
            bool(ref.get("controller")),
        )
        for ref in raw.object_metadata(obj).get("ownerReferences") or []
        if isinstance(ref, Mapping)
    ]


def _with_hint(error: KubeError) -> KubeError:
    if error.status != _NOT_FOUND:
        return error
    return KubeError(
        f"{error} (is Node Feature Discovery installed, with its NodeFeature CRD?)",
        status=error.status,
    )


def _object_missing(exc: ApiException) -> bool:
    """A 404 about the object, not about the resource type (a missing CRD)."""
    body = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else exc.body
    # The API server names the object in its message: '<plural>.<group> "<name>" not found'.
    return not isinstance(body, str) or "could not find the requested resource" not in body
