"""Regenerating the committed stubs from api.proto must reproduce them byte for byte.

A difference means someone edited the .proto without running `make proto`, edited a
generated file by hand, or upgraded grpcio-tools/mypy-protobuf without regenerating.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gen_proto.py"
API_DIR = REPO / "src" / "kubelet" / "api"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("proto")
    files = _load_script().generate(out)
    return {path.name: path.read_bytes() for path in files}


def test_generates_the_four_committed_files(regenerated: dict[str, bytes]) -> None:
    assert sorted(regenerated) == [
        "api_pb2.py",
        "api_pb2.pyi",
        "api_pb2_grpc.py",
        "api_pb2_grpc.pyi",
    ]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("api_pb2.py", id="messages"),
        pytest.param("api_pb2.pyi", id="message-types"),
        pytest.param("api_pb2_grpc.py", id="services"),
        pytest.param("api_pb2_grpc.pyi", id="service-types"),
    ],
)
def test_committed_stub_matches_regeneration(name: str, regenerated: dict[str, bytes]) -> None:
    committed = (API_DIR / name).read_bytes()
    assert committed == regenerated[name], f"{name} is stale: run `make proto`"


def test_regeneration_is_deterministic(regenerated: dict[str, bytes], tmp_path: Path) -> None:
    again = _load_script().generate(tmp_path)
    assert {path.name: path.read_bytes() for path in again} == regenerated


def test_generated_code_imports_itself_as_kubelet_api(regenerated: dict[str, bytes]) -> None:
    grpc_module = regenerated["api_pb2_grpc.py"].decode()
    assert "from kubelet.api import api_pb2" in grpc_module
    assert "from kubelet.api import api_pb2" in regenerated["api_pb2_grpc.pyi"].decode()
