"""The private mount namespace the end-to-end tests run the plugin in.

It must show the process the fake node and leave the machine's own `/sys`,
`/proc/driver` and `/dev` untouched for everything else.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devices.model import Inventory
from tests.unit.cdi.fakeroot import make_sysfs, sysfs_bus_id
from tests.unit.cdi.namespace import make_private_dev, namespace_problem, wrapper


@pytest.fixture
def usable() -> None:
    problem = namespace_problem()
    if problem is not None:
        pytest.skip(problem)


@pytest.mark.usefixtures("usable")
def test_the_process_sees_the_fake_node_and_the_machine_keeps_its_own(
    tmp_path: Path, dgx: Inventory
) -> None:
    sysfs = tmp_path / "sys"
    make_sysfs(sysfs, dgx.gpus)
    table = tmp_path / "mig-minors"
    table.write_text("config 1\nmonitor 2\n")
    dev = make_private_dev(tmp_path / "host", dgx.gpus)
    bus = sysfs_bus_id(dgx.gpus[0].pci_bus_id)
    script = (
        f"ls /sys/bus/pci/devices/{bus}/drm && cat /proc/driver/nvidia-caps/mig-minors"
        " && test -c /dev/nvidia0 && test -c /dev/dri/card1 && echo quiet > /dev/null"
        " && head -c 4 /dev/urandom | wc -c"
    )
    done = subprocess.run(
        [*wrapper(sysfs, table, dev), "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["card1", "renderD128", "config", "1", "monitor", "2", "4"]
    # Outside, nothing changed.
    assert not os.path.exists(f"/sys/bus/pci/devices/{bus}/drm")
    assert not os.path.exists("/proc/driver/nvidia-caps/mig-minors")
    assert os.path.realpath("/dev") == "/dev"
    assert not os.path.samefile("/dev", dev)


@pytest.mark.usefixtures("usable")
def test_a_failed_mount_stops_before_the_command_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    command = [*wrapper(tmp_path / "missing-sysfs", tmp_path / "table"), "touch", str(marker)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode != 0
    assert not marker.exists()
