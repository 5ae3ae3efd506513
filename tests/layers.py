"""The three test layers, read from where a test lives, and the rule of the unit layer.

- `e2e`: everything under `tests/e2e/`. These tests start processes: the
  plugin, the `kubelet-sim` command, helm, the demo, a helper built with gcc
  and run as a program.
- `reliability`: everything under `tests/reliability/`. The fault suites
  (short forms, and long forms marked `long`) and the soak.
- `unit`: everything under `tests/unit/`, one folder per package of `src/`.
  A unit test runs in this process: no subprocess, and no socket beyond the
  servers the test itself runs in this process (gRPC servers on unix sockets,
  the kubelet simulator, the in-process Kubernetes API server, the inspection
  endpoint).

The unit rule is enforced: while a unit test is set up, runs and is torn down,
starting a process fails the test with one line naming the rule.

A fixture may compile an artefact that the test then loads into this process
(the fake `libnvidia-ml.so.1` and the fake driver libraries are built with the
system C compiler once per session and loaded with `dlopen`). Such a test is
still a unit test: what it exercises runs in-process, and the compiler is a
build step of its fixture, like building the package. The fixture says so by
running the compiler inside `build_step(...)`, the one exemption.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "e2e", "reliability")
RULE = (
    "unit tests run in-process and start no processes; a test that starts {what} "
    "belongs in tests/e2e/<area>/ (see tests/layers.py)"
)


def layer_of(path: Path) -> str:
    """The layer of a test file: its first directory under tests/ decides."""
    try:
        first = path.resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return "unit"
    return first if first in LAYERS else "unit"


class SubprocessInUnitTest(AssertionError):
    """A unit test started a process."""


class _Guard:
    """Watches every way this process starts a child.

    It records each child's pid (the suite's leak check looks only at those)
    and, while `active` and outside `build_step`, refuses to start one.
    """

    def __init__(self) -> None:
        self.active = False
        self.building = 0
        self.pids: list[int] = []
        self._saved: list[tuple[object, str, object]] = []

    def _check(self, what: str) -> None:
        if self.active and not self.building:
            raise SubprocessInUnitTest(RULE.format(what=what))

    def install(self) -> None:
        guard = self
        original_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

        def execute_child(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kw: Any) -> Any:
            program = args if isinstance(args, (str, bytes)) else list(args)[:1]
            guard._check(f"a subprocess ({program!r})")
            result = original_child(popen, args, *rest, **kw)
            guard.pids.append(popen.pid)
            return result

        self._patch(subprocess.Popen, "_execute_child", execute_child)
        # os.system waits for its child; the others return the child's pid in the parent.
        pid_of: dict[str, Callable[[Any], int] | None] = {
            "system": None,
            "fork": int,
            "forkpty": lambda pid_and_fd: int(pid_and_fd[0]),
            "posix_spawn": int,
            "posix_spawnp": int,
        }
        for name, pid in pid_of.items():
            self._patch(os, name, self._refusing(getattr(os, name), f"a process (os.{name})", pid))

    def _refusing(
        self, original: Callable[..., Any], what: str, pid_of: Callable[[Any], int] | None
    ) -> Callable[..., Any]:
        def refusing(*args: Any, **kwargs: Any) -> Any:
            self._check(what)
            result = original(*args, **kwargs)
            if pid_of is not None and pid_of(result) > 0:  # in the parent
                self.pids.append(pid_of(result))
            return result

        return refusing

    def _patch(self, owner: object, name: str, replacement: object) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def uninstall(self) -> None:
        while self._saved:
            owner, name, original = self._saved.pop()
            setattr(owner, name, original)


def running_children(pids: list[int]) -> set[int]:
    """Those of `pids` that are still running children of this process (not zombies)."""
    me = os.getpid()
    found: set[int] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.add(pid)
    return found


GUARD = _Guard()


@contextlib.contextmanager
def build_step() -> Iterator[None]:
    """Let a fixture run a build tool (a C compiler) while a unit test is set up."""
    GUARD.building += 1
    try:
        yield
    finally:
        GUARD.building -= 1


@contextlib.contextmanager
def guarding(item: pytest.Item) -> Iterator[None]:
    """Refuse processes for the duration of one phase of a unit test."""
    if item.get_closest_marker("unit") is None:
        yield
        return
    GUARD.active = True
    try:
        yield
    finally:
        GUARD.active = False
