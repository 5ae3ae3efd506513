"""The README's text and the parts of it the README tests read."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TEXT = README.read_text(encoding="utf-8")


def section(title: str) -> str:
    """The text under a heading (any level) up to the next heading of the same or higher level.

    Lines inside fenced code blocks are never headings (``# terminal 1`` is a comment).
    """
    lines = TEXT.splitlines()
    fenced = False
    level = 0
    body: list[str] = []
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if level:
            if heading and len(heading.group(1)) <= level:
                break
            body.append(line)
        elif heading and heading.group(2) == title:
            level = len(heading.group(1))
    assert level, f"no section {title!r}"
    return "\n".join(body)


def first_column(table_text: str) -> list[str]:
    """The backticked names in the first column of every table row."""
    names: list[str] = []
    for line in table_text.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        names += re.findall(r"`([^`]+)`", cell)
    return names
