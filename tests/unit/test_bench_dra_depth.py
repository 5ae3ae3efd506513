"""The `dra_depth` bench's clocks: a health list's time is when it first said the change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.dra_depth import HealthLists, instances


def test_the_first_list_from_the_append_on_that_says_it_is_the_one_timed() -> None:
    lists = HealthLists()
    lists.lists = [
        (1.0, {"gpu-0": "Unhealthy", "gpu-1": "Healthy"}),  # an earlier round's
        (2.0, {"gpu-0": "Healthy", "gpu-1": "Healthy"}),  # a resend, after the append
        (2.5, {"gpu-0": "Unhealthy", "gpu-1": "Healthy"}),
        (3.0, {"gpu-0": "Unhealthy", "gpu-1": "Healthy"}),
    ]
    assert lists.first("gpu-0", "Unhealthy", since=1.5) == 2.5
    assert lists.first("gpu-1", "Healthy", since=0.0) == 1.0
    with pytest.raises(LookupError):
        lists.first("gpu-1", "Unhealthy", since=0.0)


def test_instances_counts_every_gpus_in_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "mig-state.json"
    assert instances(state) == 0  # no file yet: nothing was made
    one = {"gi": 1, "ci": 0, "profileId": 19, "start": 0, "slot": 0}
    state.write_text(
        json.dumps(
            {
                "version": 1,
                "gpus": {
                    "GPU-a": {"creates": 2, "destroys": 0, "instances": [one, one]},
                    "GPU-b": {"creates": 1, "destroys": 1, "instances": []},
                },
            }
        )
    )
    assert instances(state) == 2
