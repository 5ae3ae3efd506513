"""The CDI tests' fixtures (tests/unit/cdi/conftest.py): the fake driver libraries and node."""

from tests.unit.cdi.conftest import dgx, driver_libraries, fake_root, logs

__all__ = ["dgx", "driver_libraries", "fake_root", "logs"]
