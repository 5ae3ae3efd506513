"""The plugin's readiness check of a resource's MPS control daemon.

Before a shared resource is served, the plugin asks its control daemon for
``get_default_active_thread_percentage`` through ``nvidia-cuda-mps-control``,
with the resource's pipe and log directories in the environment, exactly as
the reference does. The ``.ready``/``.started`` markers are not consulted: a
daemon that crashed after writing them would pass such a check, while the
command only succeeds when a daemon is answering on the resource's pipe.

The probe is bounded by ``timeout`` and raises `MpsNotReady` (a transient
error) with a one-line reason the reconcile loop can show as is.

A daemon answers as soon as it runs, but its memory and thread limits are
applied after that; `daemon_ready` also reads its ``.started`` marker, which
says they are, and which (the GPUs and limit commands it applied), and
compares them with the limits the plugin serves the resource with.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

from foundation.files import FileRejected, read_small_file
from mps.control import CONTROL_PROGRAM, send_command
from mps.errors import CommandFailure, MpsCommandError, MpsConfigError, MpsNotReady, OtherLimits
from mps.layout import MpsLayout
from mps.limits import daemon_spec
from resources.model import PluginDevice

__all__ = ["MARKER_LIMIT", "PROBE_COMMAND", "daemon_ready", "probe_daemon"]

PROBE_COMMAND = "get_default_active_thread_percentage"
# A marker is one line naming a few GPUs and their limits; more is not ours.
MARKER_LIMIT = 64 * 1024


def _check_pipe_dir(pipe_dir: Path, resource: str) -> None:
    prefix = f"MPS control daemon for {resource} is not ready"
    try:
        is_dir = pipe_dir.is_dir()
    except PermissionError:
        raise MpsNotReady(f"{prefix}: permission denied on {pipe_dir}") from None
    if not is_dir:
        raise MpsNotReady(
            f"{prefix}: pipe directory {pipe_dir} does not exist "
            "(is the mps-control-daemon running on this node and /mps mounted?)"
        )
    if not os.access(pipe_dir, os.R_OK | os.X_OK):
        raise MpsNotReady(f"{prefix}: permission denied on {pipe_dir}")


async def probe_daemon(
    *,
    mps_root_ctr: Path,
    resource: str,
    timeout: float,
    program: str = CONTROL_PROGRAM,
) -> None:
    """Succeed when the control daemon of ``resource`` under ``mps_root_ctr`` answers.

    ``mps_root_ctr`` is the MPS root as mounted in this container (``/mps``).

    Raises:
        MpsNotReady: the pipe directory is missing or not accessible, the
            control program is missing, or the daemon does not answer (not
            running, refused, or no answer within ``timeout`` seconds).
    """
    layout = MpsLayout(mps_root_ctr)
    _check_pipe_dir(layout.pipe_dir(resource), resource)
    prefix = f"MPS control daemon for {resource} is not ready"
    try:
        await send_command(
            PROBE_COMMAND,
            environment=layout.environment(resource),
            timeout=timeout,
            program=program,
        )
    except MpsCommandError as error:
        match error.failure:
            case CommandFailure.MISSING:
                reason = f"control program missing: {error}"
            case CommandFailure.DENIED:
                reason = f"permission denied: {error}"
            case CommandFailure.TIMEOUT:
                reason = f"daemon not answering: timed out after {timeout:g}s"
            case CommandFailure.FAILED:
                reason = f"daemon not answering: {error}"
        raise MpsNotReady(f"{prefix}: {reason}") from None


async def daemon_ready(
    root: Path, resource: str, devices: Sequence[PluginDevice], *, timeout: float
) -> MpsNotReady | None:
    """None when the daemon of `resource` answers with the limits for `devices`, else why not.

    They must be the limits the resource is served with, so after an edit or
    a node label change (which the daemon follows on its own) no replica is
    handed out under the previous limits: a daemon on other limits is
    `OtherLimits`.
    """
    marker = MpsLayout(root).started(resource)
    try:
        spec = daemon_spec(resource, devices)
    except MpsConfigError as err:
        return MpsNotReady(f"MPS for {resource}: {err}")
    try:
        applied = await asyncio.to_thread(read_small_file, marker, limit=MARKER_LIMIT)
    except FileRejected as err:
        if not marker.exists():
            return MpsNotReady(
                f"MPS control daemon for {resource} has not finished starting (no {marker})"
            )
        return MpsNotReady(f"cannot read {marker}: {err.reason}")
    try:
        await probe_daemon(mps_root_ctr=root, resource=resource, timeout=timeout)
    except MpsNotReady as err:
        return err
    # An empty marker is a daemon from an earlier release, which did not say
    # its limits: trusted as before, so that an upgrade that rolls the plugin
    # first does not withdraw MPS resources until the daemon rolls too.
    if applied.strip() and applied.decode("utf-8", "replace") != spec.marker:
        return OtherLimits(
            f"MPS control daemon for {resource} applies other limits than this config asks "
            f"for ({_summary(applied)}, not {spec.summary}); it restarts with the new config"
        )
    return None


def _summary(marker: bytes) -> str:
    """The limits a marker says were applied, or that it does not say."""
    try:
        found = json.loads(marker)
    except ValueError:
        found = None
    summary = found.get("summary") if isinstance(found, dict) else None
    return summary[:200] if isinstance(summary, str) else "limits not stated"
