"""The ``--help`` text and the documentation's flags table.

Both are generated from the flags as the settings models declare them
(`settings.flags.PLUGIN_FLAGS`), so what users read always matches what the
parser accepts.
"""

from __future__ import annotations

from settings.flag_spec import show_default
from settings.flags import FLAGS, PLUGIN_FLAGS

__all__ = ["cli_help", "flags_markdown_table"]

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


def cli_help() -> str:
    """Usage text listing every flag, its environment variables, default and file key."""
    return PLUGIN_FLAGS.help_text(preamble=PREAMBLE)


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
        rows.append(f"| {names} | {env} | `{show_default(spec)}` | {key} | {meaning} |")
    return "\n".join(rows) + "\n"
