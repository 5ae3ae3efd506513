"""The capacity bench's dip arithmetic: what counts as a dip, and for how long."""

from __future__ import annotations

import pytest

from bench.capacity import longest_dip


def test_a_list_that_grows_has_no_dip() -> None:
    timeline = [(0.0, {"gpu": 16}), (0.1, {"gpu": 32})]
    assert longest_dip(timeline, {"gpu": 16}, end=1.0) == 0.0


def test_an_empty_moment_on_the_way_is_a_dip() -> None:
    timeline = [(0.0, {"gpu": 8}), (0.2, {"gpu": 0}), (0.25, {"gpu": 8}), (0.5, {"gpu": 0})]
    # the second stretch lasts until the end of the recording
    assert longest_dip(timeline, {"gpu": 8}, end=0.9) == pytest.approx(0.4)


def test_the_longest_stretch_over_all_keys_wins() -> None:
    timeline = [
        (0.0, {"a": 2, "b": 2}),
        (1.0, {"a": 1, "b": 2}),
        (1.5, {"a": 2, "b": 0}),
        (3.5, {"a": 2, "b": 2}),
    ]
    assert longest_dip(timeline, {"a": 2, "b": 2}, end=4.0) == pytest.approx(2.0)
