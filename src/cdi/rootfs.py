"""A host directory tree as this container sees it, with symlinks kept inside it.

The driver root is the host's `/` (or `/run/nvidia/driver` for a driver
container) mounted at `/driver-root` in the plugin container. Its symlinks
were written for the host: `/usr/lib/x86_64-linux-gnu/libcuda.so.1` may point
at `/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15`, an absolute path that
means `<mount>/usr/lib/...` here, not the plugin image's own `/usr/lib`.
`os.path.realpath` would follow it into the wrong tree, so resolution walks
the path one component at a time, restarts absolute targets at the mount, and
clamps `..` at the mount: the same rule as `openat2(RESOLVE_IN_ROOT)`.

Paths in and out are host paths (absolute, below the tree's root). Every probe
answers False, None or an empty list on any error: a missing directory, a
dangling or looping link, a permission error or a file of the wrong type is
"not there", never an exception.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

# Linux gives up after 40 links in one lookup (ELOOP); so do we.
MAX_LINKS = 40


@dataclass(frozen=True)
class RootView:
    """The host tree mounted at `mount` in this container (`/` for the container's own)."""

    mount: str

    def local(self, path: str) -> str:
        """Where host path `path` (already resolved) is in this container."""
        base = self.mount.rstrip("/")
        return base + "/" + path.lstrip("/") if path.strip("/") else (base or "/")

    def resolve(self, path: str) -> str | None:
        """Host path `path` with every symlink followed inside the tree, or None.

        None when a component is missing, a link dangles or loops, or a
        non-directory sits in the middle of the path.
        """
        pending = [part for part in reversed(path.split("/")) if part]
        done: list[str] = []
        links = 0
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join([*done, part])
            try:
                info = os.lstat(self.local(here))
            except (OSError, ValueError):
                return None
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if links > MAX_LINKS:
                    return None
                try:
                    target = os.readlink(self.local(here))
                except (OSError, ValueError):
                    return None
                if target.startswith("/"):
                    done = []
                pending.extend(part for part in reversed(target.split("/")) if part)
                continue
            if pending and not stat.S_ISDIR(info.st_mode):
                return None
            done.append(part)
        return "/" + "/".join(done)

    def stat(self, path: str) -> os.stat_result | None:
        """`stat` of what `path` resolves to inside the tree, or None."""
        resolved = self.resolve(path)
        if resolved is None:
            return None
        try:
            return os.stat(self.local(resolved))
        except (OSError, ValueError):
            return None

    def is_file(self, path: str) -> bool:
        info = self.stat(path)
        return info is not None and stat.S_ISREG(info.st_mode)

    def is_resolved_file(self, path: str) -> bool:
        """Whether `path`, a result of `resolve`, is still a regular file (one lstat)."""
        try:
            return stat.S_ISREG(os.lstat(self.local(path)).st_mode)
        except (OSError, ValueError):
            return False

    def is_dir(self, path: str) -> bool:
        info = self.stat(path)
        return info is not None and stat.S_ISDIR(info.st_mode)

    def is_socket(self, path: str) -> bool:
        info = self.stat(path)
        return info is not None and stat.S_ISSOCK(info.st_mode)

    def is_executable(self, path: str) -> bool:
        info = self.stat(path)
        return info is not None and stat.S_ISREG(info.st_mode) and bool(info.st_mode & 0o111)

    def listdir(self, path: str) -> list[str]:
        """Sorted entry names of directory `path`, or [] when it cannot be listed."""
        resolved = self.resolve(path)
        if resolved is None:
            return []
        try:
            return sorted(os.listdir(self.local(resolved)))
        except (OSError, ValueError):
            return []

    def readlink(self, path: str) -> str | None:
        """The target text of symlink `path` (its directory resolved in the tree), or None."""
        parent, _, name = path.rstrip("/").rpartition("/")
        directory = self.resolve(parent or "/")
        if directory is None or not name:
            return None
        try:
            return os.readlink(self.local(directory.rstrip("/") + "/" + name))
        except (OSError, ValueError):
            return None
