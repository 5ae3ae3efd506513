"""What a process logs when it starts running with a config.

One INFO line with the config's digest, the file and only the values that
differ from the defaults (the whole config is on ``/state``), and one WARNING
line per problem worth fixing that did not stop the load (an unknown key such
as ``flags.migStrategi``, a field that is ignored). Both only when something
changed since the config before, so a reload of the same file says nothing.
"""

from __future__ import annotations

import json

from loguru import logger

from settings.effective import EffectiveConfig

__all__ = ["announce"]


def announce(config: EffectiveConfig, previous: EffectiveConfig | None) -> None:
    """Log ``config``, now applied in place of ``previous`` (None at start-up)."""
    if previous is None or previous.digest != config.digest:
        logger.info(
            "effective config {}", json.dumps(config.summary(), sort_keys=True, default=str)
        )
    known = set(previous.warnings) if previous is not None else set()
    for warning in config.warnings:
        if warning not in known:
            logger.warning("{}", warning)
