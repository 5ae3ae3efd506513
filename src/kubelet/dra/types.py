"""Plain values shared by the DRA servicer and what prepares claims (no gRPC here)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]


@dataclass(frozen=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Preparer(Protocol):
    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """By claim uid."""
        ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim uid -> error ("" when it went well)."""
        ...
