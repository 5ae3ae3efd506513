"""Which kubelet is listening: the one place that tells a kubelet restart.

A kubelet that restarts deletes its registration socket and creates a new
one, and forgets every plugin registered with the old one. `KubeletWatch`
numbers the kubelet sockets it sees, in order: each socket not seen before is
a new generation, and every generation after the first is a restart. Each
resource server records the generation it registered with, so "registered
with the kubelet that is there now" is one comparison of numbers.

A socket is known by its inode and change time (`paths.socket_identity`); a
socket caught in its unlink reads as gone, so a kubelet that is going away is
never mistaken for a new one. The fleet looks before a pass registers (the
generation registrations are recorded against) and again after a pass that
registered: a registration goes to whatever kubelet is at the path when it
dials, so a kubelet that came up during the pass and was replaced before any
later look would otherwise never be counted; each registration also tells
the watch the socket it dialed (`saw`), for one replaced even before that.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from kubelet.paths import socket_identity

# Registration is off (no kubelet socket configured): one constant generation.
UNREGISTERED = 0
# Identities remembered, so a look that finds an older socket again (it cannot
# be told from a new one otherwise) does not count it twice.
REMEMBERED = 64


class KubeletWatch:
    """Numbers the kubelet sockets seen at one path."""

    def __init__(self, socket: Path | None) -> None:
        self.socket = socket
        self.generation = UNREGISTERED
        self._seen: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._recorded = 0

    @property
    def restarts(self) -> int:
        """Kubelets seen after the first one."""
        return max(0, self.generation - 1)

    @property
    def unrecorded(self) -> int:
        """Restarts seen since the last `take_restarts()`."""
        return self.restarts - self._recorded

    def take_restarts(self) -> int:
        """Restarts seen since the last call: each is recorded (history, metric) once."""
        count, self._recorded = self.unrecorded, self.restarts
        return count

    def look(self) -> int | None:
        """The generation of the kubelet socket there now; None when there is none."""
        if self.socket is None:
            return UNREGISTERED
        return self.saw(socket_identity(self.socket))

    def saw(self, identity: tuple[int, int] | None) -> int | None:
        """The generation of the kubelet socket known by `identity` (a new one if unseen).

        A registration tells what it dialed this way, so a kubelet that was
        replaced before the next look is counted all the same.
        """
        if identity is None:
            return None
        known = self._seen.get(identity)
        if known is not None:
            return known
        self.generation += 1
        self._seen[identity] = self.generation
        if len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        return self.generation
