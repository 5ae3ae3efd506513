"""Log output of ``gpu-feature-discovery``: one record per line on stderr.

The same two formats as the plugin (``--log-format json`` for the chart,
``text`` otherwise), so one log pipeline reads both containers. Records never
carry local variables, and stdlib logging from libraries is routed through
the same sink at WARNING.
"""

from __future__ import annotations

import logging
import sys

from loguru import logger

__all__ = ["configure"]

TEXT_FORMAT = "{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level: <7} {message}"


class _InterceptHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(exception=record.exc_info).log(level, "{}", record.getMessage())


def configure(log_format: str = "text", *, level: str = "INFO") -> None:
    logger.remove()
    if log_format == "json":
        logger.add(sys.stderr, level=level, serialize=True, backtrace=False, diagnose=False)
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
