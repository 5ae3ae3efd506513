"""Where labels go: the `LabelSink` seam and the NFD features file.

Node Feature Discovery's ``local`` source reads every non-hidden file in
``features.d/`` as ``key=value`` lines and publishes them as node labels.
The file is replaced atomically on every pass (a temporary ``.gfd*`` file in
the same directory, mode 0644, fsync, rename), so NFD never reads half a file
and never sees the temporary one, which it skips because of the leading dot.
Removing the file on a clean exit makes NFD drop the labels again.

Other destinations (a NodeFeature object, the node's own labels through the
API server) implement the same two-method `LabelSink` protocol and are plugged
in by the command, so the labelling loop does not know about them. They fail
with `PublishError` when the API server is away: the loop then retries the
pass after a jittered backoff instead of exiting, except with ``--oneshot``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, TextIO, runtime_checkable

from loguru import logger

from labels.errors import LabelError

__all__ = [
    "FileSink",
    "LabelSink",
    "PublishError",
    "StreamSink",
    "format_labels",
    "parse_labels",
]

FILE_MODE = 0o644
_LEGACY_STAGING_DIR = "gfd-tmp"


class PublishError(LabelError):
    """A sink could not publish this pass for a reason that may pass (the API server).

    A periodic run logs the one-line message and retries the pass after a
    jittered backoff; a ``--oneshot`` run exits 1 with it.
    """


@runtime_checkable
class LabelSink(Protocol):
    """A destination for the node's label set."""

    def publish(self, labels: Mapping[str, str]) -> None:
        """Make ``labels`` the node's GPU labels (the whole set, every pass).

        Raises:
            PublishError: not published this time; the pass is retried later.
            LabelError: the labels cannot be published; the run ends with exit 1.
        """
        ...

    def withdraw(self) -> None:
        """Called when a periodic run ends: take the labels back if this sink does that.

        Never raises; problems are logged as warnings.
        """
        ...


def format_labels(labels: Mapping[str, str]) -> str:
    """One ``key=value`` line per label, sorted by key so passes are byte-comparable."""
    return "".join(f"{key}={labels[key]}\n" for key in sorted(labels))


def parse_labels(text: str) -> dict[str, str]:
    """Read a features file the way NFD does (first ``=`` splits; no ``=`` means true)."""
    labels: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        labels[key] = value if sep else "true"
    return labels


class FileSink:
    """The NFD features file, replaced atomically."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def publish(self, labels: Mapping[str, str]) -> None:
        """Replace the file with `labels`.

        Raises:
            PublishError: the file system is full (or over quota): the file
                keeps its previous labels and the pass is retried.
            LabelError: the file cannot be written at all (a missing or
                read-only directory, no permission).
        """
        data = format_labels(labels).encode("utf-8")
        directory = self.path.parent
        try:
            descriptor, temporary = tempfile.mkstemp(prefix=".gfd", dir=directory)
        except OSError as error:
            raise _write_error(f"cannot write {self.path}", error, f" in {directory}") from error
        try:
            with os.fdopen(descriptor, "wb") as stream:
                # mkstemp creates 0600; NFD may run as another user.
                os.fchmod(stream.fileno(), FILE_MODE)
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, self.path)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise _write_error(f"cannot write {self.path}", error) from error

    def withdraw(self) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError as error:
            logger.warning("cannot remove {path}: {error}", path=self.path, error=error)
        # Older versions staged their writes in features.d/gfd-tmp, which NFD trips over.
        staging = self.path.parent / _LEGACY_STAGING_DIR
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)


# Space can come back without anyone touching the labeller: worth a retry.
_PASSING = frozenset({errno.ENOSPC, errno.EDQUOT})


def _write_error(what: str, error: OSError, where: str = "") -> LabelError:
    message = f"{what}: {error.strerror or error}{where}"
    return PublishError(message) if error.errno in _PASSING else LabelError(message)


class StreamSink:
    """Labels printed to a stream (stdout when the output file is empty)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def publish(self, labels: Mapping[str, str]) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(format_labels(labels))
        stream.flush()

    def withdraw(self) -> None:
        """Printed labels cannot be taken back."""
