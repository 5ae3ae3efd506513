"""The ``--help`` text and the documentation's flags table.

Both are generated from `settings.flag_table` and the defaults on `Flags`,
so what users read always matches what the parser accepts.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

from settings.flag_table import FLAGS, PLUGIN_FLAGS, FlagSpec
from settings.flags import Flags

__all__ = ["cli_help", "default_text", "flags_markdown_table"]

PREAMBLE = (
    "Every flag can also be set with the environment variable shown, and many in the",
    "config file (--config-file) at the key shown. Precedence: command line, then",
    "environment, then config file, then the default. Booleans take --flag or",
    "--flag=false; an empty boolean variable means false. Lists are comma-separated",
    "on the command line and in variables.",
    "",
    "Commands:",
    "  check FILE [flags]   validate a config file as the plugin would load it",
)


def default_text(spec: FlagSpec) -> str:
    """The default as users would write it (``"none"``, ``true``, ``"envvar"``)."""
    value: Any = Flags.model_fields[spec.field].default
    if spec.field == "dev_root":
        return "(the driver root)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        if not value:
            return "(none)"
        value = ",".join(item.value if isinstance(item, Enum) else str(item) for item in value)
    elif isinstance(value, Enum):
        value = value.value
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value)


def cli_help() -> str:
    """Usage text listing every flag, its environment variables, default and file key."""
    return PLUGIN_FLAGS.help_text(default_of=default_text, preamble=PREAMBLE)


def flags_markdown_table() -> str:
    """A Markdown table of every flag (the documentation embeds it verbatim)."""
    rows = [
        "| Flag (aliases) | Environment | Default | Config file key | Meaning |",
        "|---|---|---|---|---|",
    ]
    for spec in FLAGS:
        names = ", ".join(f"`--{name}`" for name in spec.names) or "(environment only)"
        env = ", ".join(f"`{name}`" for name in spec.env)
        key = f"`{spec.file_key}`" if spec.file_key else "—"
        meaning = spec.help
        if spec.choices:
            meaning += " (" + r" \| ".join(spec.choices) + ")"
        if not spec.reference:
            meaning += " *(ours)*"
        rows.append(f"| {names} | {env} | `{default_text(spec)}` | {key} | {meaning} |")
    return "\n".join(rows) + "\n"
