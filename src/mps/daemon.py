"""One MPS control daemon: start it with its limits, check it, stop it.

Start, in the reference's order:

1. put each of the resource's GPUs in ``EXCLUSIVE_PROCESS`` compute mode
   (through NVML, as ``nvidia-smi -i <uuid> -c EXCLUSIVE_PROCESS`` does), so
   only the MPS server runs work on them;
2. create the pipe directory (0755, SELinux-labelled when SELinux is on) and
   the log directory;
3. run ``nvidia-cuda-mps-control -d`` with only ``CUDA_MPS_PIPE_DIRECTORY``
   and ``CUDA_MPS_LOG_DIRECTORY`` set; the daemon serves every GPU it can see
   and the exclusive compute mode is what ties the GPUs to it;
4. send the pinned-memory limit of each GPU index and the active thread
   percentage (`mps.limits`);
5. write ``<resource>/.started`` (the GPUs and limits it applies, `DaemonSpec.marker`)
   and follow ``control.log``.

Stop is the reverse: ``quit``, stop following the log, compute mode back to
``DEFAULT``, remove ``.started`` and the log directory. Stop goes through every
step even when one fails and reports all problems, so a failed ``quit`` never
leaves a GPU in exclusive mode.

The external programs and the device library are injectable
(`DaemonTools`): tests run the whole sequence with a stand-in control program
and the simulated GPUs, and ``compute_modes=None`` skips the compute-mode
step on nodes where another component owns it. The daemon's ``control.log``
is followed into this process's log, routine repeats (every health check is
a client of the daemon) at DEBUG, so a steady daemon is quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from devices.compute_mode import ComputeMode, ComputeModeControl, ComputeModeError
from mps.control import CONTROL_PROGRAM, send_command, start_control_daemon
from mps.errors import MpsCommandError, MpsStartError
from mps.layout import MpsLayout
from mps.limits import DaemonSpec
from mps.probe import PROBE_COMMAND
from mps.tail import LogFollower, RepeatFilter

__all__ = [
    "SELINUX_LABEL",
    "ControlDaemon",
    "DaemonTools",
    "apply_selinux_label",
]

SELINUX_LABEL = "system_u:object_r:container_file_t:s0"


def apply_selinux_label(path: Path) -> None:
    """Label ``path`` and everything under it for use by containers."""
    value = SELINUX_LABEL.encode()
    os.setxattr(path, "security.selinux", value, follow_symlinks=False)
    for parent, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.setxattr(
                os.path.join(parent, name), "security.selinux", value, follow_symlinks=False
            )


@dataclass(frozen=True, kw_only=True)
class DaemonTools:
    """The programs a daemon runs, the GPUs' compute-mode control, and time bounds.

    ``compute_modes`` (an initialised device library) None skips the
    compute-mode step. ``command_timeout`` bounds any one program run or
    compute-mode change. ``selinux_dir`` is where SELinux shows it is
    enabled; ``label`` labels a directory tree.
    """

    control_program: str = CONTROL_PROGRAM
    compute_modes: ComputeModeControl | None = field(default=None, compare=False)
    command_timeout: float = 10.0
    log_poll_interval: float = 0.25
    selinux_dir: Path = Path("/sys/fs/selinux")
    label: Callable[[Path], None] = field(default=apply_selinux_label, compare=False)


class ControlDaemon:
    """The control daemon of one shared resource."""

    def __init__(self, spec: DaemonSpec, *, layout: MpsLayout, tools: DaemonTools) -> None:
        self.spec = spec
        self.layout = layout
        self.tools = tools
        self._log = logger.bind(resource=spec.resource)
        self._news = RepeatFilter()
        self._follower = LogFollower(
            layout.control_log(spec.resource),
            emit=self._control_log,
            interval=tools.log_poll_interval,
        )

    def _control_log(self, line: str) -> None:
        level = "INFO" if self._news.is_new(line) else "DEBUG"
        self._log.log(level, "control.log: {}", line)

    @property
    def resource(self) -> str:
        return self.spec.resource

    async def command(self, command: str) -> str:
        """Send one control command to this daemon; `MpsCommandError` on failure."""
        return await send_command(
            command,
            environment=self.layout.environment(self.resource),
            timeout=self.tools.command_timeout,
            program=self.tools.control_program,
        )

    async def check(self) -> None:
        """Raise `MpsCommandError` unless the daemon answers the readiness command."""
        await self.command(PROBE_COMMAND)

    async def start(self) -> None:
        """Start the daemon and apply its limits; `MpsStartError` says which step failed."""
        await self._set_compute_mode(ComputeMode.EXCLUSIVE_PROCESS)
        self._log.info("starting MPS control daemon for {} GPU(s)", len(self.spec.gpu_uuids))
        pipe_dir = self.layout.pipe_dir(self.resource)
        log_dir = self.layout.log_dir(self.resource)
        self._make_dir(pipe_dir)
        if self.tools.selinux_dir.exists():
            try:
                self.tools.label(pipe_dir)
            except OSError as error:
                raise MpsStartError(
                    f"error labelling {pipe_dir} with {SELINUX_LABEL}: {error}"
                ) from None
        self._make_dir(log_dir)
        try:
            await start_control_daemon(
                environment=self.layout.environment(self.resource),
                timeout=self.tools.command_timeout,
                program=self.tools.control_program,
            )
        except MpsCommandError as error:
            raise MpsStartError(
                f"error starting the MPS control daemon for {self.resource}: {error}"
            ) from None
        for command in self.spec.commands:
            try:
                await self.command(command)
            except MpsCommandError as error:
                raise MpsStartError(f"error sending '{command}': {error}") from None
        marker = self.layout.started(self.resource)
        staged = marker.with_name(marker.name + ".tmp")
        try:
            # Whole or not at all: the plugin compares the content with its own.
            staged.write_text(self.spec.marker, encoding="utf-8")
            staged.replace(marker)
        except OSError as error:
            with contextlib.suppress(OSError):
                staged.unlink()
            raise MpsStartError(f"error creating {marker}: {error.strerror}") from None
        self._follower.start()
        self._log.info("MPS control daemon started")

    async def stop(self, *, running: bool = True) -> tuple[str, ...]:
        """Stop the daemon and clean up; return the problems met (empty when clean).

        ``quit`` is always sent, but when the daemon is not known to be
        ``running`` (it was being restarted) a refused ``quit`` is expected and
        not a problem.
        """
        problems: list[str] = []
        try:
            output = (await self.command("quit")).strip()
            self._log.info("MPS control daemon stopped{}", f": {output}" if output else "")
        except MpsCommandError as error:
            if running:
                problems.append(f"error sending quit: {error}")
        await self._follower.stop()
        try:
            await self._set_compute_mode(ComputeMode.DEFAULT)
        except MpsStartError as error:
            problems.append(str(error))
        marker = self.layout.started(self.resource)
        try:
            marker.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:  # the other daemons still have to be stopped
            problems.append(f"error removing {marker}: {error.strerror}")
        shutil.rmtree(self.layout.log_dir(self.resource), ignore_errors=True)
        return tuple(problems)

    async def forget(self) -> None:
        """After the daemon died: stop following its log and drop ``.started``.

        A ``quit`` is still tried (briefly), in case the daemon is alive but
        not answering health checks and would refuse a second start.
        """
        with contextlib.suppress(MpsCommandError):
            await self.command("quit")
        await self._follower.stop()
        with contextlib.suppress(OSError):  # a marker that cannot go is reported by stop
            self.layout.started(self.resource).unlink()

    def _make_dir(self, path: Path) -> None:
        try:
            path.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as error:
            raise MpsStartError(f"error creating directory {path}: {error.strerror}") from None

    async def _set_compute_mode(self, mode: ComputeMode) -> None:
        """Set `mode` on every GPU of the daemon.

        Starting stops at the first GPU that refuses (the start failed).
        Going back to DEFAULT tries every GPU and reports all that refused,
        so one stuck GPU does not leave the others exclusive.
        """
        control = self.tools.compute_modes
        if control is None:
            return
        timeout = self.tools.command_timeout
        failed: list[str] = []
        for uuid in self.spec.gpu_uuids:
            try:
                # NVML blocks; a thread keeps the other daemons' checks running meanwhile.
                async with asyncio.timeout(timeout):
                    await asyncio.to_thread(control.set_compute_mode, uuid, mode)
            except ComputeModeError as error:
                failed.append(str(error))
            except TimeoutError:
                failed.append(f"{uuid}: no answer within {timeout:g}s")
            if failed and mode is not ComputeMode.DEFAULT:
                break
        if failed:
            raise MpsStartError(f"error setting compute mode {mode}: {'; '.join(failed)}")
        self._log.info("compute mode {} on {} GPU(s)", mode, len(self.spec.gpu_uuids))
