"""Regenerate the committed Python stubs of the kubelet APIs.

Reads each `.proto` in `PROTOS` (the device-plugin API `src/kubelet/api/api.proto`,
the DRA kubelet-plugin API `src/kubelet/api/dra/{v1,v1beta1}/api.proto`, the DRA
device-health API `src/kubelet/api/dra_health/{v1alpha1,v1beta1}/api.proto` and the plugin
registration API `src/kubelet/api/pluginregistration/v1/api.proto`) and writes, next
to each: `api_pb2.py`, `api_pb2.pyi` (mypy-protobuf), `api_pb2_grpc.py` and
`api_pb2_grpc.pyi` (mypy-protobuf's grpc plugin, which also types the `grpc.aio` stubs).

The proto path is `src/`, so the generated code imports itself as
`from kubelet.api import api_pb2` (`from kubelet.api.dra.v1 import api_pb2`, ...) with
no post-processing. protoc and both plugins are
taken from the environment running this script (grpcio-tools and mypy-protobuf), and
their output depends only on the .proto and their versions, so regeneration is
deterministic; `tests/unit/kubelet/test_proto_regen.py` checks the committed files match.

Usage: `python scripts/gen_proto.py [--out DIR]` (default: `src`, i.e. in place).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SRC_ROOT = REPO_ROOT / "src"
PROTOS = (
    Path("kubelet/api/api.proto"),
    Path("kubelet/api/dra/v1/api.proto"),
    Path("kubelet/api/dra/v1beta1/api.proto"),
    Path("kubelet/api/dra_health/v1alpha1/api.proto"),
    Path("kubelet/api/dra_health/v1beta1/api.proto"),
    Path("kubelet/api/pluginregistration/v1/api.proto"),
)
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
GENERATED = tuple(proto.with_name(proto.stem + suffix) for proto in PROTOS for suffix in SUFFIXES)


def _plugin(name: str) -> Path:
    """Find a protoc plugin installed next to the running interpreter, else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return beside
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"gen_proto: {name} not found; install the dev extras (mypy-protobuf)")
    return Path(found)


def generate(out_root: Path) -> list[Path]:
    """Run protoc with all four generators on every proto, writing under `out_root`.

    Returns the generated files (relative layout as under `src/`).
    """
    # Imported here so `--help` works without grpcio-tools installed.
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    out_root.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={SRC_ROOT}",
        f"--proto_path={well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out_root}",
        f"--grpc_python_out={out_root}",
        f"--mypy_out={out_root}",
        f"--mypy_grpc_out={out_root}",
        # Relative to the proto path so each descriptor's file name is stable
        # (`kubelet/api/api.proto`, ...) whatever the checkout location is.
        *(proto.as_posix() for proto in PROTOS),
    ]
    cwd = Path.cwd()
    try:
        os.chdir(SRC_ROOT)
        status = protoc.main(args)
    finally:
        os.chdir(cwd)
    if status != 0:
        raise SystemExit(f"gen_proto: protoc failed with status {status}")
    return [out_root / path for path in GENERATED]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=SRC_ROOT,
        help="root to write kubelet/api/**/*_pb2* under (default: src, in place)",
    )
    ns = parser.parse_args(argv)
    for path in generate(ns.out.resolve()):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
