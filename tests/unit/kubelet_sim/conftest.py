"""The kubelet tests' fixtures (tests/unit/kubelet/conftest.py), for the simulator's tests here.

The fake device plugin and the DRA plugin servers there are the other end of
the wire the simulator speaks; the product's transport tests use them too.
"""

from tests.unit.kubelet.conftest import (
    dra_simulator,
    logs,
    make_plugin,
    serve_dra,
    short_dir,
    simulator,
)

__all__ = ["dra_simulator", "logs", "make_plugin", "serve_dra", "short_dir", "simulator"]
