"""The one error type configuration problems are reported with.

Every bad input the plugin can be given (a flag, an environment variable, a
config file, a node label pointing nowhere) ends up as a `ConfigError`. The
reconcile loop treats it as permanent: retrying cannot help until the input
changes. Each problem is a single line of the form ``<origin>: <path>:
<problem>``, because it is printed as the output of a failed start and shown
on ``/state``; a multi-line message there would be cut or interleaved with
other log records, so every line break that sneaks in through a value is
escaped.

One error can carry several problems (a file with three wrong values): a
command prints `ConfigError.lines`, one problem a line, and ``str()`` joins
them with ``; `` for the places that hold one line (``/state``, a log record).
"""

from __future__ import annotations

from collections.abc import Iterable

from foundation.errors import PermanentError

__all__ = ["ConfigError", "HelpRequested", "one_line"]

# Every character `str.splitlines()` treats as a line boundary.
_LINE_BREAKS = {
    "\n": "\\n",
    "\r": "\\r",
    "\v": "\\v",
    "\f": "\\f",
    "\x1c": "\\x1c",
    "\x1d": "\\x1d",
    "\x1e": "\\x1e",
    "\x85": "\\x85",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_ESCAPE_TABLE = str.maketrans(_LINE_BREAKS)


def one_line(text: str) -> str:
    """Escape line breaks so the text is guaranteed to print as one line."""
    return text.translate(_ESCAPE_TABLE)


class ConfigError(PermanentError):
    """An invalid configuration input, located as precisely as possible.

    ``origin`` says where the bad value came from: the config file path,
    ``command line``, ``environment``, or a directory for node config
    selection. ``path`` is the field inside it (``flags.migStrategy``,
    ``--mig-strategy``, ``MIG_STRATEGY``); it may be empty when the whole
    input is at fault (an unreadable file). ``fail_on_init_error`` is the best
    knowledge of that flag at the time of the failure, so a caller can decide
    between exiting and blocking even when the config could not be built.
    ``more`` are further problems found in the same inputs.
    """

    def __init__(
        self,
        problem: str,
        *,
        origin: str = "",
        path: str = "",
        fail_on_init_error: bool = True,
        more: Iterable[ConfigError] = (),
    ) -> None:
        self.problem = problem
        self.origin = origin
        self.path = path
        self.fail_on_init_error = fail_on_init_error
        self.more: tuple[ConfigError, ...] = tuple(
            single for error in more for single in error.problems
        )
        super().__init__(self.__str__())

    @classmethod
    def combine(cls, errors: Iterable[ConfigError]) -> ConfigError:
        """One error holding every problem of ``errors``, in order (at least one)."""
        problems = [single for error in errors for single in error.problems]
        first = problems[0]
        return cls(first.problem, origin=first.origin, path=first.path, more=problems[1:])

    @property
    def problems(self) -> tuple[ConfigError, ...]:
        """Each problem as an error of its own, this one's first."""
        first = ConfigError(self.problem, origin=self.origin, path=self.path)
        return (first, *self.more)

    def lines(self) -> list[str]:
        """One line per problem."""
        head = [part for part in (self.origin, self.path, self.problem) if part]
        return [one_line(": ".join(head)), *(str(error) for error in self.more)]

    def __str__(self) -> str:
        return "; ".join(self.lines())

    def with_fail_on_init_error(self, value: bool) -> ConfigError:
        """The same error, carrying what is known about ``failOnInitError``."""
        return ConfigError(
            self.problem,
            origin=self.origin,
            path=self.path,
            fail_on_init_error=value,
            more=self.more,
        )


class HelpRequested(Exception):
    """``-h``/``--help`` was on the command line; ``text`` is what to print."""

    def __init__(self, text: str) -> None:
        super().__init__("help requested")
        self.text = text
