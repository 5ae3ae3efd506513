"""SIGTERM/SIGINT ask for a clean stop; SIGHUP asks for a reload.

A second SIGTERM/SIGINT while stopping exits at once: an operator who presses
Ctrl-C twice means it.
"""

from __future__ import annotations

import asyncio
import os
import signal

from loguru import logger

from reconciler.core.mailbox import Hint, Mailbox


def install(mailbox: Mailbox, *, stopping: asyncio.Event | None = None) -> None:
    """Route signals to the mailbox; `stopping` is also set on the first stop signal."""
    loop = asyncio.get_running_loop()
    stopping_now = False

    def on_stop(signum: int) -> None:
        nonlocal stopping_now
        if stopping_now:
            logger.warning("second {sig}: exiting now", sig=signal.Signals(signum).name)
            os._exit(1)
        stopping_now = True
        logger.info("received {sig}: stopping", sig=signal.Signals(signum).name)
        mailbox.post(Hint.SHUTDOWN)
        if stopping is not None:
            stopping.set()

    def on_reload() -> None:
        logger.info("received SIGHUP: reloading")
        mailbox.post(Hint.RELOAD)

    loop.add_signal_handler(signal.SIGTERM, on_stop, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, on_stop, signal.SIGINT)
    loop.add_signal_handler(signal.SIGHUP, on_reload)


def uninstall() -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.remove_signal_handler(sig)
