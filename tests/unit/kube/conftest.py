"""Fixtures for the Kubernetes API tests: an emulated API server on a local port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.kube.apiserver import ApiServer, running_apiserver


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    async with running_apiserver() as server:
        yield server
