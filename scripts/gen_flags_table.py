"""Rewrite the flags table embedded in docs/configuration.md from the settings.

The table is generated (`settings.flags_markdown_table`) and a test keeps the
document in step with it; after adding or changing a flag, run:

    .venv/bin/python scripts/gen_flags_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from settings import flags_markdown_table  # noqa: E402 (the import path is set just above)

HEADER = "| Flag (aliases) | Environment | Default | Config file key | Meaning |"
DOCUMENTS = (REPO / "docs" / "configuration.md",)


def rewrite(text: str, table: str) -> str:
    """`text` with the table that starts at `HEADER` replaced by `table`."""
    lines = text.split("\n")
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join([*lines[:start], *table.rstrip("\n").split("\n"), *lines[end:]])


def main() -> int:
    table = flags_markdown_table()
    for path in DOCUMENTS:
        path.write_text(rewrite(path.read_text(encoding="utf-8"), table), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
