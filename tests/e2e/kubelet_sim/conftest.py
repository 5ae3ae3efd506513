"""The kubelet tests' fixtures (tests/unit/kubelet/conftest.py), for the CLI tests here."""

from tests.unit.kubelet.conftest import (
    dra_simulator,
    logs,
    make_plugin,
    serve_dra,
    short_dir,
    simulator,
)

__all__ = ["dra_simulator", "logs", "make_plugin", "serve_dra", "short_dir", "simulator"]
