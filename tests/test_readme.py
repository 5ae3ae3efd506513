"""The README documents what the code does: the flags table and the quick start."""

from __future__ import annotations

from pathlib import Path

from settings import flags_markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_flags_table_is_current() -> None:
    assert flags_markdown_table() in README.read_text(encoding="utf-8")


def test_readme_quick_start_is_the_two_make_targets() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text
    assert "make test" in text
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "make test" in ci
