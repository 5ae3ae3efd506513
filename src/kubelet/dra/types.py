"""What the DRA kubelet plugin exchanges with the rest of the product, without gRPC.

The kubelet asks the plugin to prepare and unprepare ResourceClaims; what preparing
means (reading the claim, writing its CDI spec, checkpointing) lives in
`kubelet.dra.prepare`, behind the `Preparer` protocol. These plain frozen values
are all that crosses the boundary, so a preparer is written and tested without
protobuf, and the gRPC side (`kubelet.dra.servicer`) is tested with a scripted
preparer.

The socket layout and the registration constants are here too: the server that
binds the sockets and the simulator that plays the kubelet must agree on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

#: `PluginInfo.type` of a DRA kubelet plugin (pluginregistration's `DRAPlugin`).
PLUGIN_TYPE = "DRAPlugin"
#: The DRAPlugin services this plugin serves, in the kubelet's "<package>.<service>"
#: form; the kubelet takes the first it supports, so the newest comes first.
V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"
#: The device-health services (KEP-4680) served beside them on the same socket, in
#: the same form and order. They come after the DRAPlugin ones, which the kubelet
#: picks from; a kubelet that looks for a health service in the list opens the
#: stream only if one it speaks is there, the first ones call v1alpha1 regardless.
V1BETA1_HEALTH_SERVICE = "v1beta1.DRAResourceHealth"
V1ALPHA1_HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
HEALTH_SERVICES = (V1BETA1_HEALTH_SERVICE, V1ALPHA1_HEALTH_SERVICE)
SUPPORTED_SERVICES = (V1_SERVICE, V1BETA1_SERVICE, *HEALTH_SERVICES)

#: The DRAPlugin service socket's name inside `<plugins dir>/<driver>/`.
PLUGIN_SOCKET = "dra.sock"


def registration_socket(registrar_dir: Path, driver: str) -> Path:
    """Where the Registration service is served: `<registrar dir>/<driver>-reg.sock`."""
    return registrar_dir / f"{driver}-reg.sock"


def plugin_socket(plugins_dir: Path, driver: str) -> Path:
    """Where the DRAPlugin service is served: `<plugins dir>/<driver>/dra.sock`."""
    return plugins_dir / driver / PLUGIN_SOCKET


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it in a NodePrepareResources call."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True)
class PreparedDevice:
    """One device a prepared claim makes available, with the CDI IDs that inject it."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareResult:
    """The outcome for one claim: its devices, or a one-line error ("" = prepared)."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Preparer(Protocol):
    """Prepares and unprepares claims; both calls are retried by the kubelet.

    `prepare` answers by claim UID; `unprepare` maps each claim UID to an error
    ("" = done). A claim missing from an answer is reported to the kubelet as not
    done, so it calls again.
    """

    async def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]: ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]: ...
