"""The plugin's readiness check of a resource's MPS control daemon.

Before a shared resource is served, the plugin asks its control daemon for
``get_default_active_thread_percentage`` through ``nvidia-cuda-mps-control``,
with the resource's pipe and log directories in the environment, exactly as
the reference does. The ``.ready``/``.started`` markers are not consulted: a
daemon that crashed after writing them would pass such a check, while the
command only succeeds when a daemon is answering on the resource's pipe.

The probe is bounded by ``timeout`` and raises `MpsNotReady` (a transient
error) with a one-line reason the reconcile loop can show as is.
"""

from __future__ import annotations

import os
from pathlib import Path

from mps.control import CONTROL_PROGRAM, send_command
from mps.errors import CommandFailure, MpsCommandError, MpsNotReady
from mps.layout import MpsLayout

__all__ = ["PROBE_COMMAND", "probe_daemon"]

PROBE_COMMAND = "get_default_active_thread_percentage"


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
