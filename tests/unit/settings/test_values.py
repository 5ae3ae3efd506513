"""Single-value parsing follows the reference's flag library exactly."""

from __future__ import annotations

import math

import pytest

from settings.values import parse_bool, parse_duration, parse_int, parse_seconds, split_list


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_true_spellings(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_false_spellings(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["yes", "no", "on", "tRuE", "", " true", "2"])
def test_other_booleans_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="as bool value"):
        parse_bool(text)


@pytest.mark.parametrize(
    ("text", "items"),
    [
        pytest.param("envvar", ["envvar"], id="single"),
        pytest.param("envvar, cdi-cri", ["envvar", "cdi-cri"], id="trimmed"),
        pytest.param("envvar,", ["envvar", ""], id="trailing-empty-kept"),
        pytest.param("", [""], id="empty-is-one-empty-item"),
    ],
)
def test_split_list(text: str, items: list[str]) -> None:
    assert split_list(text) == items


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", 0), ("12", 12), ("0x10", 16), ("0o17", 15), ("017", 15), ("0b11", 3), ("-3", -3)],
)
def test_integers_with_base_detection(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["", "x", "1.5", "0x"])
def test_bad_integers(text: str) -> None:
    with pytest.raises(ValueError, match="invalid integer"):
        parse_int(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("60s", 60.0),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("300ms", 0.3),
        ("1.5s", 1.5),
        ("2us", 2e-6),
        ("2\u00b5s", 2e-6),
        ("-1s", -1.0),
        ("infinite", math.inf),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("60", 'time: missing unit in duration "60"'),
        ("5x", 'time: unknown unit "x" in duration "5x"'),
        ("s", 'time: invalid duration "s"'),
    ],
)
def test_bad_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^time: ") as caught:
        parse_duration(text)
    assert str(caught.value) == message


def test_seconds() -> None:
    assert parse_seconds("0.5") == 0.5
    for bad in ("-1", "nan", "inf", "x"):
        with pytest.raises(ValueError, match="seconds"):
            parse_seconds(bad)
