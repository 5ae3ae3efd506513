"""The `loop` benchmark's parts that can be checked in seconds.

The group itself takes about a minute (three plugins, one of 4096 devices),
so the suite checks what it is made of: the generated 512-GPU node is a valid
profile with the boards it claims (and, in tests/e2e, the load process runs
against a real endpoint and reports what it did).
"""

from __future__ import annotations

from pathlib import Path

from bench.loop import node_profile
from devices.profile_schema import load_profile
from devices.simulated import build_inventory


def test_the_generated_node_is_a_valid_profile_with_nvlinked_boards(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(node_profile(24, board=8))
    inventory = build_inventory(load_profile(path))
    assert len(inventory.gpus) == 24
    first = inventory.gpus[0]
    assert sorted(first.nvlinks) == list(range(1, 8))
    assert {gpu.numa_node for gpu in inventory.gpus} == {0, 1}
    assert len({gpu.pci_bus_id for gpu in inventory.gpus}) == 24


