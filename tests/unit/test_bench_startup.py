"""The start-up bench's reading of ``-X importtime``: what was imported before registering."""

from __future__ import annotations

import pytest

from bench.lifecycle import REGISTERED, describe_imports, heavy_before, imports_before

STDERR = f"""\
import time: self [us] | cumulative | imported package
import time:      1500 |       1500 |   grpc._cython
import time:       500 |       2000 | grpc
2026-01-01T00:00:00.000+00:00 INFO    nvidia-device-plugin 0.1.0 starting
import time:      3000 |       3000 |     pydantic_core._pydantic_core
import time:      1000 |       4000 |   pydantic_core
import time:       250 |        250 | prometheus_client.values
import time:       300 |        300 |   kube.on_demand
import time:       400 |        400 |     kubelet.api.dra.v1.api_pb2
import time:       100 |        100 |   mps.probes_elsewhere
2026-01-01T00:00:00.300+00:00 INFO    {REGISTERED} as nvidia-gpu.sock
import time:     90000 |      90000 | kubernetes
import time:       200 |        200 | mps.probe
"""


def test_only_imports_before_the_registration_count_by_top_level_package() -> None:
    spent = imports_before(STDERR)
    assert spent == {
        "grpc": 2.0,
        "pydantic_core": 4.0,
        "prometheus_client": 0.25,
        "kube": 0.3,
        "kubelet": 0.4,
        "mps": 0.1,
    }


def test_the_note_lists_the_heaviest_first() -> None:
    note = describe_imports(imports_before(STDERR))
    assert note.startswith("ms by package: pydantic_core 4, grpc 2")


def test_heavy_parts_are_named_by_module_and_only_before_the_registration() -> None:
    # kube.on_demand is not the client, mps.probes_elsewhere not the probe; the
    # client and the probe come after the registration.
    assert heavy_before(STDERR) == ["kubelet.api.dra"]


@pytest.mark.parametrize("stderr", ["", "no imports logged at all\n"])
def test_a_run_without_importtime_lines_imported_nothing(stderr: str) -> None:
    assert imports_before(stderr) == {}
