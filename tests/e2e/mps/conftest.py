"""The MPS tests' fixtures (from tests/unit/mps/conftest.py): an MPS root, the stand-ins."""

from tests.unit.mps.conftest import daemon, fakes_on_path, layout, workdir

__all__ = ["daemon", "fakes_on_path", "layout", "workdir"]
