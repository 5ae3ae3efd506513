"""What every `kubelet-sim` one-shot command shares: its error, the snapshot, JSON output.

Kept apart from `cli` so the DRA commands (`cli_dra`) and the device-plugin ones
report failures and print responses the same way without importing each other.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message

from kubelet_sim.client import PluginCallError
from kubelet_sim.model import Snapshot
from kubelet_sim.snapshot_file import read_snapshot, snapshot_path

PROG = "kubelet-sim"


class CliError(Exception):
    """A failure reported as one line on stderr with exit status 1."""


def load_snapshot(directory: Path) -> Snapshot:
    """The snapshot a serving simulator keeps in `directory`, or CliError saying why not."""
    path = snapshot_path(directory)
    try:
        return read_snapshot(path)
    except FileNotFoundError:
        raise CliError(f"no simulator snapshot at {path} (is `{PROG} serve` running?)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"unreadable simulator snapshot {path}: {exc}") from exc


M = TypeVar("M", bound=Message)


def run_call(call: Callable[[], Coroutine[Any, Any, M]]) -> M:
    """Run one call to a plugin; a refused or malformed one is a `CliError` (one line)."""
    try:
        return asyncio.run(call())
    except PluginCallError as exc:
        raise CliError(f"{exc.method} failed: {exc.code.name}: {exc.details}") from exc
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def print_message(message: Message) -> None:
    """A response as JSON with the protobuf field names, keys sorted."""
    body = json_format.MessageToDict(message, preserving_proto_field_name=True)
    print(json.dumps(body, indent=2, sort_keys=True))
