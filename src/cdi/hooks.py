"""The OCI hooks a CDI spec asks the runtime to run, and `--cdi-disable-hooks`.

Every hook runs the executable given by `--nvidia-cdi-hook-path` (a host
path: the runtime executes it, not the plugin). The toolkit ships it under
two names with different command lines: `nvidia-ctk` takes `hook <name>`,
the standalone `nvidia-cdi-hook` (and any other name) takes `<name>`.
`argv[0]` is the executable's base name either way.

`--cdi-disable-hooks` lists hook names to leave out (`create-symlinks`,
`update-ldcache`, `chmod`, ...); `all` leaves out every hook.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from cdi.edits import Hook

CREATE_SYMLINKS = "create-symlinks"
UPDATE_LDCACHE = "update-ldcache"
CHMOD = "chmod"
ALL_HOOKS = "all"


@dataclass(frozen=True)
class HookMaker:
    """Builds hooks for one hook executable, dropping the disabled ones."""

    path: str = "/usr/bin/nvidia-ctk"
    disabled: frozenset[str] = frozenset()

    @classmethod
    def of(cls, path: str, disabled: Iterable[str] = ()) -> HookMaker:
        names = frozenset(name.strip() for name in disabled if name.strip())
        return cls(path=path, disabled=names)

    def enabled(self, name: str) -> bool:
        return ALL_HOOKS not in self.disabled and name not in self.disabled

    def make(self, name: str, *args: str) -> Hook | None:
        """The hook `name` with `args`, or None when it is disabled."""
        if not self.enabled(name):
            return None
        program = os.path.basename(self.path.rstrip("/")) or self.path
        prefix = (program, "hook", name) if program == "nvidia-ctk" else (program, name)
        return Hook(name=name, path=self.path, args=(*prefix, *args))

    def symlinks(self, links: Iterable[tuple[str, str]]) -> Hook | None:
        """`create-symlinks --link <target>::<link> ...`, or None for no links."""
        args = [arg for target, link in links for arg in ("--link", f"{target}::{link}")]
        return self.make(CREATE_SYMLINKS, *args) if args else None

    def update_ldcache(self, folders: Iterable[str]) -> Hook | None:
        args = [arg for folder in folders for arg in ("--folder", folder)]
        return self.make(UPDATE_LDCACHE, *args) if args else None

    def chmod(self, mode: str, paths: Iterable[str]) -> Hook | None:
        args = [arg for path in paths for arg in ("--path", path)]
        return self.make(CHMOD, "--mode", mode, *args) if args else None
