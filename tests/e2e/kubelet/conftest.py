"""The kubelet tests' fixtures (tests/unit/kubelet/conftest.py), for the command-line tests here."""

from tests.unit.kubelet.conftest import make_plugin, short_dir, simulator

__all__ = ["make_plugin", "short_dir", "simulator"]
