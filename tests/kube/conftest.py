"""Fixtures for the Kubernetes API tests: an emulated API server on a local port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from tests.kube.apiserver import ApiServer, NodeEmulator


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with NodeEmulator() as handler:
        # Declared up front so listing works before the first node exists.
        handler.resources["v1/nodes"] = kmock.ResourceInfo(namespaced=False, kind="Node")
        server = ApiServer(handler)
        await server.up()
        try:
            yield server
        finally:
            await server.down()
