"""The MPS tests' fixtures (tests/mps/conftest.py): a short MPS root and the stand-in programs."""

from tests.mps.conftest import daemon, fakes_on_path, layout, workdir

__all__ = ["daemon", "fakes_on_path", "layout", "workdir"]
