"""The one place that configures log sinks, for every entry point.

The plugin, gpu-feature-discovery and mps-control-daemon all log the same
way, so one log pipeline reads every container of the chart: one line per
event on stderr, JSON lines (`--log-format json`, what the Helm chart uses)
or plain text with the resource, when there is one, at the end. Tracebacks
never print local variables (`diagnose=False`), and stdlib logging from
libraries is routed through loguru at WARNING so grpc, urllib3 and the
Kubernetes client stay quiet.
"""

from __future__ import annotations

import logging
import sys

from loguru import logger

TEXT_FORMAT = (
    "{time:YYYY-MM-DDTHH:mm:ss.SSSZ} {level: <7} {message}"
    "{extra[resource_suffix]}"
)


class _InterceptHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(exception=record.exc_info).log(level, "{}", record.getMessage())


def _suffix(record: dict[str, object]) -> None:
    extra = record["extra"]
    assert isinstance(extra, dict)
    resource = extra.get("resource")
    extra["resource_suffix"] = f" resource={resource}" if resource else ""


def configure(log_format: str = "text", *, level: str = "INFO") -> None:
    logger.remove()
    logger.configure(patcher=_suffix)  # type: ignore[arg-type]
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
    for noisy in ("transitions", "watchfiles", "urllib3", "kubernetes", "grpc", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
