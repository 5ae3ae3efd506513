"""The README's and the docs pages' text, and the parts of them the doc tests read.

The README is the front door (what the plugin is, the quick start, the
architecture, the test layers and an index of `docs/`); everything else lives
in one page per topic under `docs/`. `section(title, page=...)` reads a
section of either.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
TEXT = README.read_text(encoding="utf-8")

# A markdown link or image, [text](target), outside inline code.
_LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def pages() -> list[Path]:
    """Every markdown page under docs/."""
    return sorted(DOCS.glob("*.md"))


def text(page: str = "README.md") -> str:
    """The text of README.md or of a docs page, by its path from the repository root."""
    if page == "README.md":
        return TEXT
    return (REPO / page).read_text(encoding="utf-8")


def _headings(body: str) -> list[tuple[int, str]]:
    """(level, title) of every heading, skipping lines inside fenced code blocks."""
    found: list[tuple[int, str]] = []
    fenced = False
    for line in body.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if heading:
            found.append((len(heading.group(1)), heading.group(2).strip()))
    return found


def section(title: str, page: str = "README.md") -> str:
    """The text under a heading (any level) up to the next heading of the same or higher level.

    `page` is README.md (the default) or a docs page such as "docs/inspection.md".
    Lines inside fenced code blocks are never headings (``# terminal 1`` is a comment).
    """
    lines = text(page).splitlines()
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
    assert level, f"no section {title!r} in {page}"
    return "\n".join(body)


def slug(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    plain = re.sub(r"[^\w\- ]", "", title.lower())
    return plain.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes for the headings of a markdown file (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, title in _headings(path.read_text(encoding="utf-8")):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    """Every relative link target in a markdown file (not inside code), as written."""
    body = path.read_text(encoding="utf-8")
    body = re.sub(r"```.*?```", "", body, flags=re.DOTALL)
    body = re.sub(r"`[^`\n]*`", "", body)
    return [
        target
        for target in _LINK.findall(body)
        if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto:
    ]


def first_column(table_text: str) -> list[str]:
    """The backticked names in the first column of every table row."""
    names: list[str] = []
    for line in table_text.splitlines():
        if not line.startswith("| `"):
            continue
        cell = line.split("|")[1]
        names += re.findall(r"`([^`]+)`", cell)
    return names
