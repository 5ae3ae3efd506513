"""Regenerating the committed stubs from the .proto files must reproduce them byte for byte.

Covers every vendored or written kubelet API: the device-plugin API
(`kubelet/api/api.proto`), the DRA plugin API (`kubelet/api/dra/{v1,v1beta1}`), the DRA
device-health API (`kubelet/api/dra_health/{v1alpha1,v1beta1}`) and the
plugin-registration API (`kubelet/api/pluginregistration/v1`). A difference means
someone edited a .proto without running `make proto`, edited a generated file by
hand, or upgraded grpcio-tools/mypy-protobuf without regenerating.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gen_proto.py"
SRC = REPO / "src"

# Package directory (under src/) -> the module its generated code imports itself as.
PACKAGES = {
    "kubelet/api": "kubelet.api",
    "kubelet/api/dra/v1": "kubelet.api.dra.v1",
    "kubelet/api/dra/v1beta1": "kubelet.api.dra.v1beta1",
    "kubelet/api/dra_health/v1alpha1": "kubelet.api.dra_health.v1alpha1",
    "kubelet/api/dra_health/v1beta1": "kubelet.api.dra_health.v1beta1",
    "kubelet/api/pluginregistration/v1": "kubelet.api.pluginregistration.v1",
}
STUBS = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")
COMMITTED = [f"{package}/{stub}" for package in PACKAGES for stub in STUBS]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_proto", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _relative(files: list[Path], root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in files}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("proto")
    return _relative(_load_script().generate(out), out)


def test_generates_four_files_for_each_api(regenerated: dict[str, bytes]) -> None:
    assert sorted(regenerated) == sorted(COMMITTED)


def test_every_proto_in_the_tree_is_generated() -> None:
    protos = sorted(p.relative_to(SRC).as_posix() for p in (SRC / "kubelet").rglob("*.proto"))
    assert protos == sorted(f"{package}/api.proto" for package in PACKAGES)


@pytest.mark.parametrize("name", [pytest.param(name, id=name) for name in COMMITTED])
def test_committed_stub_matches_regeneration(name: str, regenerated: dict[str, bytes]) -> None:
    committed = (SRC / name).read_bytes()
    assert committed == regenerated[name], f"{name} is stale: run `make proto`"


def test_regeneration_is_deterministic(regenerated: dict[str, bytes], tmp_path: Path) -> None:
    again = _relative(_load_script().generate(tmp_path), tmp_path)
    assert again == regenerated


@pytest.mark.parametrize(("package", "module"), list(PACKAGES.items()))
def test_generated_code_imports_itself_by_its_package(
    package: str, module: str, regenerated: dict[str, bytes]
) -> None:
    assert f"from {module} import api_pb2" in regenerated[f"{package}/api_pb2_grpc.py"].decode()
    assert f"from {module} import api_pb2" in regenerated[f"{package}/api_pb2_grpc.pyi"].decode()


@pytest.mark.parametrize("package", list(PACKAGES))
def test_each_generated_package_is_importable(package: str) -> None:
    assert (SRC / package / "__init__.py").is_file()
