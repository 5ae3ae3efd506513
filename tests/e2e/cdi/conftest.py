"""The CDI tests' fixtures (tests/cdi/conftest.py): the fake driver libraries and node."""

from tests.cdi.conftest import dgx, driver_libraries, fake_root, logs

__all__ = ["dgx", "driver_libraries", "fake_root", "logs"]
