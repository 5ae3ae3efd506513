"""Kill points: named steps at which the process kills itself with SIGKILL.

Crash recovery is only proven by crashing at each step that leaves something
on disk. The fault tests name the steps in `PLUGIN_KILL_AT` (a comma list);
a module that offers kill points names them in its docstring and calls the
`KillPoints` it was given at each. Nothing is armed unless the variable is
set, so in production a kill point is one set lookup.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

ENV = "PLUGIN_KILL_AT"


@dataclass(frozen=True)
class KillPoints:
    armed: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KillPoints:
        names = (name.strip() for name in env.get(ENV, "").split(","))
        return cls(frozenset(name for name in names if name))

    def __call__(self, name: str) -> None:
        if name in self.armed:
            # Said on stderr directly: a kill leaves no time for a logger's queue.
            os.write(2, f"{ENV}: killed at {name}\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)
