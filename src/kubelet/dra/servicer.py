"""The DRAPlugin service: the kubelet's NodePrepareResources / NodeUnprepareResources.

The kubelet sends several claims in one call and reads one answer per claim UID;
the contract is that a claim's failure goes in its own entry, and an RPC error
discards the whole answer. So nothing a claim can do fails the call: a claim
without a UID or name gets an error entry, a preparer that raises turns into an
error entry for each claim of that call (and one log line), a claim the preparer
did not answer is reported as not prepared (the kubelet calls again). The server
keeps serving whatever a preparer does; only a cancelled call (deadline, stop)
propagates.

Both served versions (`v1` and `v1beta1`) have the same messages on the wire
(checked by tests/unit/kubelet/test_proto_descriptor_dra.py), so one servicer
written against the v1 classes is bound under both service names, with requests
parsed by us as for the device plugin (`kubelet.handlers`): a malformed body is
INVALID_ARGUMENT in one line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
from loguru import logger

from kubelet.api.dra.v1 import api_pb2 as dra_v1
from kubelet.api.dra.v1beta1 import api_pb2 as dra_v1beta1
from kubelet.dra.types import ClaimRef, Preparer, PrepareResult
from kubelet.handlers import unary
from kubelet.servicer import RpcObserver
from settings.errors import one_line as escape_breaks

#: The gRPC service names the servicer is bound under (method paths start with them).
SERVICES = tuple(
    module.DESCRIPTOR.services_by_name["DRAPlugin"].full_name for module in (dra_v1, dra_v1beta1)
)
NOT_ANSWERED = "not prepared: the plugin gave no result for this claim"
NOT_UNPREPARED = "not unprepared: the plugin gave no result for this claim"
Context = grpc.aio.ServicerContext[Any, Any]


def one_line(err: BaseException) -> str:
    """An exception as one line: its message, or its type when it has none."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# What the API server accepts: a namespace is a DNS label, a name a DNS
# subdomain, a uid a UUID (kept loose: letters, digits, '-', '.', '_'). A uid
# names the claim's spec file, so nothing else ever reaches the file system.
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_UID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9._]{0,127}")
ERROR_LIMIT = 1024  # bytes of one claim's error: what a pod event shows, bounded


def _claim_problem(claim: dra_v1.Claim) -> str:
    missing = [name for name in ("namespace", "uid", "name") if not getattr(claim, name)]
    named = f"{claim.namespace or '?'}/{claim.name or '?'}"
    if missing:
        return f"claim {named}: missing {', '.join(missing)}"
    for field, rule in (("namespace", _NAMESPACE), ("name", _NAME), ("uid", _UID)):
        value = getattr(claim, field)
        if not rule.fullmatch(value):
            return f"claim {named}: {field} {value!r} is not a Kubernetes {field}"
    return ""


def error_text(text: str) -> str:
    """One claim's error as the kubelet gets it: one line, control characters escaped,
    at most `ERROR_LIMIT` bytes."""
    line = escape_breaks(text).translate(_CONTROLS)
    data = line.encode()
    if len(data) <= ERROR_LIMIT:
        return line
    return data[: ERROR_LIMIT - 3].decode(errors="ignore") + "..."


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F) if chr(c) != "\t"}


def _split(claims: Sequence[dra_v1.Claim]) -> tuple[list[ClaimRef], dict[str, str]]:
    """The well-formed claims (each UID once, in order) and an error per malformed one."""
    valid: dict[str, ClaimRef] = {}
    invalid: dict[str, str] = {}
    for claim in claims:
        problem = _claim_problem(claim)
        if problem:
            invalid.setdefault(claim.uid, error_text(problem))
        else:
            valid.setdefault(claim.uid, ClaimRef(claim.namespace, claim.uid, claim.name))
    for uid in invalid:
        valid.pop(uid, None)
    return list(valid.values()), invalid


def _prepared(result: PrepareResult) -> dra_v1.NodePrepareResourceResponse:
    if result.error:
        return dra_v1.NodePrepareResourceResponse(error=error_text(result.error))
    return dra_v1.NodePrepareResourceResponse(
        devices=[
            dra_v1.Device(
                request_names=list(device.request_names),
                pool_name=device.pool_name,
                device_name=device.device_name,
                cdi_device_ids=list(device.cdi_device_ids),
            )
            for device in result.devices
        ]
    )


class DraServicer:
    """Translates DRAPlugin calls to a `Preparer` and its answers back, claim by claim."""

    def __init__(
        self, preparer: Preparer, *, driver: str, observe: RpcObserver | None = None
    ) -> None:
        self._preparer = preparer
        self._driver = driver
        self._observe = observe
        self._log = logger.bind(driver=driver)

    def _record(self, method: str, started: float) -> None:
        if self._observe is not None:
            self._observe(self._driver, method, time.perf_counter() - started, "OK")

    async def NodePrepareResources(
        self, request: dra_v1.NodePrepareResourcesRequest, context: Context
    ) -> dra_v1.NodePrepareResourcesResponse:
        started = time.perf_counter()
        claims, invalid = _split(request.claims)
        response = dra_v1.NodePrepareResourcesResponse()
        for uid, problem in invalid.items():
            response.claims[uid].error = problem
        if claims:
            try:
                results: Mapping[str, PrepareResult] = await self._preparer.prepare(claims)
            except Exception as err:
                error = self._failure("NodePrepareResources", claims, err)
                results = {claim.uid: PrepareResult(error=error) for claim in claims}
            for claim in claims:
                response.claims[claim.uid].CopyFrom(self._answer(claim, results))
        self._record("NodePrepareResources", started)
        return response

    async def NodeUnprepareResources(
        self, request: dra_v1.NodeUnprepareResourcesRequest, context: Context
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        started = time.perf_counter()
        claims, invalid = _split(request.claims)
        response = dra_v1.NodeUnprepareResourcesResponse()
        for uid, problem in invalid.items():
            response.claims[uid].error = problem
        if claims:
            try:
                errors: Mapping[str, str] = await self._preparer.unprepare(claims)
            except Exception as err:
                error = self._failure("NodeUnprepareResources", claims, err)
                errors = dict.fromkeys((claim.uid for claim in claims), error)
            for claim in claims:
                error = errors.get(claim.uid, NOT_UNPREPARED)
                if not isinstance(error, str):
                    error = f"not unprepared: unusable result from the plugin: {error!r}"
                response.claims[claim.uid].error = error_text(error)
        self._record("NodeUnprepareResources", started)
        return response

    def _failure(self, method: str, claims: Sequence[ClaimRef], err: Exception) -> str:
        """Log a preparer that raised; the one-line error every claim of the call gets."""
        self._log.error(
            "{method} of {count} claim(s) failed in the plugin: {error}",
            method=method,
            count=len(claims),
            error=one_line(err),
        )
        return f"{method} failed: {one_line(err)}"

    def _answer(
        self, claim: ClaimRef, results: Mapping[str, PrepareResult]
    ) -> dra_v1.NodePrepareResourceResponse:
        result = results.get(claim.uid)
        if result is None:
            return dra_v1.NodePrepareResourceResponse(error=NOT_ANSWERED)
        try:
            return _prepared(result)
        except (AttributeError, TypeError, ValueError) as err:
            # A preparer's answer that does not fit the message is that claim's
            # failure, not the call's.
            self._log.error(
                "unusable prepare result for claim {claim}: {error}",
                claim=str(claim),
                error=one_line(err),
            )
            return dra_v1.NodePrepareResourceResponse(
                error=f"not prepared: unusable result from the plugin: {one_line(err)}"
            )


def dra_handlers(servicer: DraServicer) -> tuple[grpc.GenericRpcHandler, ...]:
    """The DRAPlugin service of `servicer` under each served version's name."""
    return tuple(
        grpc.method_handlers_generic_handler(
            service,
            {
                "NodePrepareResources": unary(
                    dra_v1.NodePrepareResourcesRequest, servicer.NodePrepareResources
                ),
                "NodeUnprepareResources": unary(
                    dra_v1.NodeUnprepareResourcesRequest, servicer.NodeUnprepareResources
                ),
            },
        )
        for service in SERVICES
    )
