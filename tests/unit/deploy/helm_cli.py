"""Turn `helm upgrade -i` command lines into the values and namespace Helm would use.

The deployment guide's commands are the contract with users, so the tests run
them: each shell block is split into commands, `cat << EOF > file` heredocs are
written to a scratch directory (paths are remapped there), and each
`helm upgrade -i` of this chart becomes (release, namespace, values) using Helm's
own parsers for `--set`, `--set-string` and `--set-file`.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm

from tests.unit.deploy.chart import CHART_VERSION, REPO_ROOT, merge

# Fences may be indented (a command inside a list item).
FENCE = re.compile(r"^[ \t]*```(?:shell|sh|bash)\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
HEREDOC = re.compile(r"^cat << ?EOF > (\S+)\n(.*?)^EOF$", re.MULTILINE | re.DOTALL)

# How the guide refers to this chart: a directory in the repository or its package.
OUR_CHARTS = ("./charts/nvidia-device-plugin", f"nvidia-device-plugin-{CHART_VERSION}.tgz")


@dataclass(frozen=True)
class HelmInstall:
    """One `helm upgrade -i` of this chart."""

    command: str
    release: str
    chart: str
    namespace: str
    values: dict[str, Any] = field(hash=False)


def shell_blocks(markdown: str) -> list[str]:
    return [textwrap.dedent(m.group(1)) for m in FENCE.finditer(markdown)]


def heredocs(markdown: str) -> dict[str, str]:
    """Files the guide creates with `cat << EOF > path`, by path."""
    files: dict[str, str] = {}
    for block in shell_blocks(markdown):
        for m in HEREDOC.finditer(block):
            files[m.group(1)] = m.group(2)
    return files


def commands(block: str) -> list[str]:
    """Commands of a shell block, with backslash continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", HEREDOC.sub("", block))
    return [line.strip() for line in joined.splitlines() if line.strip()]


def parse_install(command: str, *, remap: dict[str, Path]) -> HelmInstall | None:
    """The install a command performs, or None if it is not an install of this chart."""
    words = shlex.split(command)
    if words[:3] != ["helm", "upgrade", "-i"] and words[:3] != ["helm", "upgrade", "--install"]:
        return None
    positional: list[str] = []
    namespace = "default"
    values: dict[str, Any] = {}
    rest = iter(words[3:])
    for word in rest:
        name, eq, inline = word.partition("=")
        if name in ("--namespace", "-n"):
            namespace = inline if eq else next(rest)
        elif name in ("--set", "--set-string", "--set-file", "--version", "-f", "--values"):
            arg = inline if eq else next(rest)
            if name == "--set":
                values = merge(values, helm.parse_set_string(arg))
            elif name == "--set-string":
                values = merge(values, helm.parse_set_string_values(arg))
            elif name == "--set-file":
                key, _, path = arg.partition("=")
                values = merge(values, helm.parse_set_file(f"{key}={remap.get(path, path)}"))
            elif name in ("-f", "--values"):
                values = merge(values, helm.values_from_yaml((REPO_ROOT / arg).read_text()))
        elif name in ("--create-namespace", "--wait", "--devel"):
            continue
        elif word.startswith("-"):
            raise ValueError(f"flag {word!r} in {command!r} is not understood by this parser")
        else:
            positional.append(word)
    release, chart = positional
    if chart not in OUR_CHARTS:
        return None
    return HelmInstall(command, release, chart, namespace, values)


def installs(markdown: str, scratch: Path) -> list[HelmInstall]:
    """Every install of this chart in the guide, its heredoc files written under `scratch`."""
    remap: dict[str, Path] = {}
    for index, (path, text) in enumerate(sorted(heredocs(markdown).items())):
        target = scratch / f"{index}-{Path(path).name}"
        target.write_text(text)
        remap[path] = target
    found = []
    for block in shell_blocks(markdown):
        for command in commands(block):
            install = parse_install(command, remap=remap)
            if install is not None:
                found.append(install)
    return found
