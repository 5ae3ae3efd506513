"""The API server's version (`GET /version`), read as raw JSON like `raw`'s requests.

DRA's ResourceSlice layout depends on it: from Kubernetes 1.35 a slice holds
counter sets or devices, never both, and before 1.35 a device can only
consume a counter set of its own slice (`resources.dra_slices.pack`). The
version is what `kubectl version` shows as the server's; `gitVersion`
(`v1.35.2`, `v1.34.1-gke.1200`) is read first, the `major` and `minor` fields
(`1`, `35+` on some providers) when it does not parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from kube import raw
from kube.errors import KubeError
from kube.official import ApiClient, VersionApi

__all__ = ["ServerVersion", "parse_server_version", "read_server_version"]

_GIT_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?")
_NUMBER = re.compile(r"^(\d+)")


@dataclass(frozen=True)
class ServerVersion:
    """The server's Kubernetes release (major, minor) and the version text it reported."""

    major: int
    minor: int
    text: str

    @property
    def release(self) -> tuple[int, int]:
        return self.major, self.minor

    def __str__(self) -> str:
        return self.text or f"{self.major}.{self.minor}"


def read_server_version(client: ApiClient, *, timeout: raw.Timeout) -> ServerVersion:
    """`GET /version`.

    Raises:
        KubeError: the request failed, or its answer names no version (one line).
    """
    try:
        response = cast(
            raw.RawResponse,
            VersionApi(client).get_code(_preload_content=False, _request_timeout=timeout),
        )
        body = raw.read_json(response)
    except Exception as exc:
        raise KubeError.wrap("reading the API server's version", exc) from exc
    version = parse_server_version(body)
    if version is None:
        raise KubeError(f"reading the API server's version: no version in {_shown(body)}")
    return version


def parse_server_version(body: Mapping[str, Any]) -> ServerVersion | None:
    """The version in a `/version` answer; None when it names none."""
    git = str(body.get("gitVersion") or "")
    found = _GIT_VERSION.match(git)
    if found is not None:
        return ServerVersion(int(found.group(1)), int(found.group(2)), git)
    major = _NUMBER.match(str(body.get("major") or ""))
    minor = _NUMBER.match(str(body.get("minor") or ""))
    if major is None or minor is None:
        return None
    return ServerVersion(int(major.group(1)), int(minor.group(1)), git)


def _shown(body: Mapping[str, Any]) -> str:
    text = str(dict(body))
    return text if len(text) <= 120 else text[:117] + "..."
