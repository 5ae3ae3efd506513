"""The one place that configures log sinks, for every entry point.

The plugin, gpu-feature-discovery and mps-control-daemon all log the same
way, so one log pipeline reads every container of the chart: one line per
event on stderr, either JSON (`--log-format json`, what the Helm chart uses)
or plain text with the resource, when there is one, at the end.

A JSON line is one flat object, as klog's and zap's JSON formats write it:
``ts`` (RFC 3339 with the offset, milliseconds), ``level``, ``msg``,
``logger`` (the module that logged), then the event's own fields (what was
bound with ``logger.bind`` or passed by keyword), then ``error`` with the
traceback when there is one. Nothing else: log collectors index every key,
and loguru's own record (file paths, icons, elapsed time) would multiply the
size of each line for nothing.

Native code can write to the process's stderr too: gRPC's C core prints
``E1201 12:00:00.000000 42 add_port.cc:83] ...`` when a bind fails. In JSON
mode an entry point can ask (`route_native_stderr`) for file descriptor 2 to
be a pipe read by a thread that turns each such line into a JSON record
(``logger: "grpc"``), so every line a JSON-mode container prints parses.
Python's own writes keep going straight to the real stderr.

Tracebacks never print local variables (`diagnose=False`), and stdlib
logging from libraries is routed through loguru at WARNING so grpc, urllib3
and the Kubernetes client stay quiet.
"""

from __future__ import annotations

import atexit
import io
import json
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import IO, Any

from loguru import logger

__all__ = ["TEXT_FORMAT", "configure", "json_line", "native_stderr_running"]

TEXT_FORMAT = (
    "{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level: <7} {message}"
    "{extra[resource_suffix]}"
)
# Keys of `extra` that are ours, not the event's.
_INTERNAL = frozenset({"resource_suffix", "logger"})
# glog-style prefix of gRPC core lines: severity, date, time, thread, file:line.
_NATIVE = re.compile(r"^([DIWEF])\d{4} \S+\s+\d+ (\S+:\d+)\] ?(.*)$")
_NATIVE_LEVELS = {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}


class _InterceptHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(exception=record.exc_info).bind(logger=record.name).log(
            level, "{}", record.getMessage()
        )


def _suffix(record: dict[str, object]) -> None:
    extra = record["extra"]
    assert isinstance(extra, dict)
    resource = extra.get("resource")
    extra["resource_suffix"] = f" resource={resource}" if resource else ""


def json_line(record: Mapping[str, Any]) -> str:
    """One loguru record as one flat JSON object (no newline)."""
    extra: Mapping[str, Any] = record["extra"]
    line: dict[str, Any] = {
        "ts": record["time"].isoformat(timespec="milliseconds"),
        "level": record["level"].name.lower(),
        "msg": record["message"],
        "logger": extra.get("logger") or record["name"],
    }
    for key, value in extra.items():
        if key not in _INTERNAL and key not in line:
            line[key] = value
    exception = record["exception"]
    if exception is not None and exception.type is not None:
        line["error"] = "".join(
            traceback.format_exception(exception.type, exception.value, exception.traceback)
        ).rstrip()
    return json.dumps(line, default=str, ensure_ascii=False)


def _json_sink(stream: IO[str]) -> Callable[[Any], None]:
    def write(message: Any) -> None:
        stream.write(json_line(message.record) + "\n")
        stream.flush()

    return write


class _NativeStderr:
    """Fd 2 made a pipe; a thread turns what native code writes there into log records."""

    def __init__(self) -> None:
        self.real = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        # Python's own stderr (tracebacks of a crash, warnings) bypasses the pipe.
        self.stream = io.TextIOWrapper(
            io.FileIO(os.dup(self.real), "w"), line_buffering=True, errors="backslashreplace"
        )
        sys.stderr = self.stream
        self._thread = threading.Thread(
            target=self._pump, args=(read,), name="native-stderr", daemon=True
        )
        self._thread.start()
        atexit.register(self.close)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _pump(self, fd: int) -> None:
        with open(fd, "rb", closefd=True) as pipe:
            for raw in pipe:
                text = raw.decode(errors="replace").rstrip("\r\n")
                if text:
                    _log_native(text)

    def close(self) -> None:
        """Put the real stderr back on fd 2; the pipe ends and the thread drains it."""
        if self.real < 0:
            return
        os.dup2(self.real, 2)
        os.close(self.real)
        self.real = -1
        self._thread.join(timeout=1.0)


def _log_native(text: str) -> None:
    found = _NATIVE.match(text)
    if found is None:
        logger.bind(logger="stderr").warning("{}", text)
        return
    severity, where, message = found.groups()
    logger.bind(logger="grpc", source=where).log(_NATIVE_LEVELS[severity], "{}", message)


_native: _NativeStderr | None = None


def native_stderr_running() -> bool | None:
    """Whether the thread turning native stderr lines into records runs; None: fd 2 not routed.

    It is started by `configure` and ends at exit (`atexit`), after the
    plugin's last line: the supervisor only shows it.
    """
    native = _native
    return None if native is None else native.running


def configure(
    log_format: str = "text", *, level: str = "INFO", route_native_stderr: bool = False
) -> None:
    """Send every record to stderr as JSON lines or text.

    ``route_native_stderr`` (JSON only; for entry points, not libraries or
    tests) also turns what native code writes to fd 2 into JSON records.
    """
    global _native
    logger.remove()
    logger.configure(patcher=_suffix)  # type: ignore[arg-type]
    if log_format == "json":
        if route_native_stderr and _native is None:
            _native = _NativeStderr()
        stream = _native.stream if _native is not None else sys.stderr
        logger.add(_json_sink(stream), level=level, backtrace=False, diagnose=False)
    else:
        logger.add(
            sys.stderr,
            level=level,
            format=TEXT_FORMAT,
            colorize=False,
            backtrace=False,
            diagnose=False,
        )
    logging.basicConfig(handlers=[_InterceptHandler()], level=logging.WARNING, force=True)
    for noisy in ("transitions", "watchfiles", "urllib3", "kubernetes", "grpc", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
