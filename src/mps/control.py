"""Running ``nvidia-cuda-mps-control`` and the other programs MPS needs, bounded.

The control program has two modes. ``-d`` starts a control daemon, which
detaches; without arguments it is a client that reads one command from
stdin, forwards it to the daemon found through ``CUDA_MPS_PIPE_DIRECTORY``
and prints the answer. As in the reference, the program is looked up on this
process's PATH but run with only the two MPS variables in its environment, and
a command is written to stdin without a newline before stdin is closed.

Every run has a timeout, and a child that outlives it, or whose caller is
cancelled, is killed and reaped: a stuck control daemon must never stall the
plugin's reconcile loop or the daemon's shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO

from mps.errors import CommandFailure, MpsCommandError, one_line

__all__ = ["CONTROL_PROGRAM", "run_program", "send_command", "start_control_daemon"]

CONTROL_PROGRAM = "nvidia-cuda-mps-control"
_MAX_DETAIL = 300


def _detail(output: bytes) -> str:
    text = one_line(output.decode(errors="replace"))
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def _denied(text: str) -> bool:
    # What the control program prints when the pipe or its socket is not accessible.
    return "permission denied" in text.lower()


def _locate(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        raise MpsCommandError(f"{program} not found on PATH", failure=CommandFailure.MISSING)
    return found


async def _spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    stdin: int | None,
    stdout: int | IO[bytes],
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=asyncio.subprocess.STDOUT,
            env=None if env is None else dict(env),
        )
    except PermissionError as error:
        raise MpsCommandError(
            f"cannot run {argv[0]}: {error.strerror}", failure=CommandFailure.DENIED
        ) from None
    except FileNotFoundError:
        raise MpsCommandError(f"{argv[0]} not found", failure=CommandFailure.MISSING) from None
    except OSError as error:
        raise MpsCommandError(
            f"cannot run {argv[0]}: {error.strerror}", failure=CommandFailure.FAILED
        ) from None


async def _reap(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


def _check(argv: Sequence[str], returncode: int | None, output: bytes) -> None:
    if returncode == 0:
        return
    detail = _detail(output)
    name = os.path.basename(argv[0])
    message = f"{name} {' '.join(argv[1:])}".strip() + f" exited with status {returncode}"
    raise MpsCommandError(
        f"{message}: {detail}" if detail else message,
        failure=CommandFailure.DENIED if _denied(detail) else CommandFailure.FAILED,
    )


async def run_program(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin_data: bytes | None = None,
) -> str:
    """Run ``argv`` (looked up on PATH), return its combined output; `MpsCommandError` if not 0.

    ``env`` None inherits this process's environment; ``stdin_data`` None
    gives the child an empty stdin.
    """
    command = [_locate(argv[0]), *argv[1:]]
    process = await _spawn(
        command,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            output, _ = await process.communicate(stdin_data)
    except TimeoutError:
        raise MpsCommandError(
            f"{os.path.basename(argv[0])} did not finish within {timeout:g}s",
            failure=CommandFailure.TIMEOUT,
        ) from None
    finally:
        await _reap(process)
    _check(argv, process.returncode, output)
    return output.decode(errors="replace")


async def send_command(
    command: str,
    *,
    environment: Mapping[str, str],
    timeout: float,
    program: str = CONTROL_PROGRAM,
) -> str:
    """Send one control command; return what the control program printed."""
    return await run_program(
        [program], timeout=timeout, env=environment, stdin_data=command.encode()
    )


async def start_control_daemon(
    *, environment: Mapping[str, str], timeout: float, program: str = CONTROL_PROGRAM
) -> None:
    """Run ``<program> -d`` and wait for it to detach.

    The launcher's output goes to a file rather than a pipe: the detached
    daemon may inherit the launcher's descriptors, and a pipe it holds open
    would make waiting for end-of-output wait for the daemon's exit.
    """
    argv = [_locate(program), "-d"]
    with tempfile.TemporaryFile() as output:
        process = await _spawn(
            argv, env=environment, stdin=asyncio.subprocess.DEVNULL, stdout=output
        )
        try:
            async with asyncio.timeout(timeout):
                await process.wait()
        except TimeoutError:
            raise MpsCommandError(
                f"{program} -d did not return within {timeout:g}s",
                failure=CommandFailure.TIMEOUT,
            ) from None
        finally:
            await _reap(process)
        output.seek(0)
        _check([program, "-d"], process.returncode, output.read())
