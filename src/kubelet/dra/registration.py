"""The plugin-registration service a DRA plugin serves in the kubelet's plugins_registry.

Unlike the device plugin, which dials the kubelet and registers, a DRA plugin is
dialed: the kubelet's plugin watcher sees `<driver>-reg.sock` appear, calls
`GetInfo` (type `DRAPlugin`, the driver name, the DRAPlugin socket and the service
versions served), validates, and says how that went with `NotifyRegistrationStatus`.
The answer is recorded in a `KubeletStatus` the server owns (for /state and the
reconciler); a refusal is logged as a warning, because the kubelet retries on its
own and re-serving our socket would not change its mind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from loguru import logger

from kubelet.api.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet.dra.types import PLUGIN_TYPE, SUPPORTED_SERVICES
from kubelet.handlers import unary

SERVICE = registration_pb2.DESCRIPTOR.services_by_name["Registration"].full_name
Context = grpc.aio.ServicerContext[Any, Any]
# (registered, error) -> None: told of every status the kubelet sends.
StatusObserver = Callable[[bool, str], None]


@dataclass
class KubeletStatus:
    """What the kubelet last said about our registration; None: it has not said yet."""

    registered: bool | None = None
    error: str = ""
    notifications: int = 0

    def forget(self) -> None:
        """A fresh registration socket: the kubelet has to look at us again."""
        self.registered = None
        self.error = ""


class RegistrationServicer:
    """Answers the kubelet's plugin watcher for one driver."""

    def __init__(
        self,
        *,
        driver: str,
        endpoint: Path,
        status: KubeletStatus,
        on_status: StatusObserver | None = None,
    ) -> None:
        self._info = registration_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=driver,
            endpoint=str(endpoint),
            supported_versions=list(SUPPORTED_SERVICES),
        )
        self._status = status
        self._on_status = on_status
        self._log = logger.bind(driver=driver)

    async def GetInfo(
        self, request: registration_pb2.InfoRequest, context: Context
    ) -> registration_pb2.PluginInfo:
        return self._info

    async def NotifyRegistrationStatus(
        self, request: registration_pb2.RegistrationStatus, context: Context
    ) -> registration_pb2.RegistrationStatusResponse:
        status = self._status
        status.registered = request.plugin_registered
        status.error = request.error
        status.notifications += 1
        if request.plugin_registered:
            self._log.info(
                "the kubelet registered DRA driver {driver} ({endpoint})",
                driver=self._info.name,
                endpoint=self._info.endpoint,
            )
        else:
            self._log.warning(
                "the kubelet refused DRA driver {driver}: {error}",
                driver=self._info.name,
                error=request.error or "no reason given",
            )
        if self._on_status is not None:
            try:
                self._on_status(request.plugin_registered, request.error)
            except Exception as err:
                # The kubelet's notification is answered whatever an observer does.
                self._log.error("registration status observer failed: {err!r}", err=err)
        return registration_pb2.RegistrationStatusResponse()


def registration_handler(servicer: RegistrationServicer) -> grpc.GenericRpcHandler:
    """The `pluginregistration.Registration` service of `servicer`."""
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "GetInfo": unary(registration_pb2.InfoRequest, servicer.GetInfo),
            "NotifyRegistrationStatus": unary(
                registration_pb2.RegistrationStatus, servicer.NotifyRegistrationStatus
            ),
        },
    )
