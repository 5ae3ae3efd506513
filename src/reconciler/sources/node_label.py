"""This node's config label, from the Kubernetes API, as hints for the loop.

The watch itself (`kube.node_watch`) runs in its own thread with bounded
timeouts and reports every label value it reads; this module only bridges
those reports into the mailbox and decides, once, whether label-based
selection is possible at all. An API server that is unreachable never stops
the plugin from serving: the last value read (or none) stays in effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loguru import logger

from foundation.errors import PluginError
from reconciler.mailbox import Hint, Mailbox
from settings import EffectiveConfig

if TYPE_CHECKING:
    from kube.node_watch import NodeLabelWatch


class NodeLabelSource:
    """Starts the watch when it can; `first_value` is set once a list succeeded."""

    def __init__(self, *, config: EffectiveConfig, env: Mapping[str, str], mailbox: Mailbox):
        self._watch: NodeLabelWatch | None = None
        self.first_value = asyncio.Event()
        self.value: str | None = None
        flags = config.flags
        if not flags.config_directory:
            return
        if not flags.node_name:
            logger.info("per-node config selection is off: no --node-name (NODE_NAME) given")
            return
        # The Kubernetes client costs about half a second to import: only
        # nodes that select their config by label pay for it.
        from kube.client import api_access
        from kube.node_watch import NodeLabelWatch

        try:
            access = api_access(env)
        except PluginError as err:
            logger.warning("per-node config selection is off: {err}", err=str(err))
            return
        if access is None:
            logger.info(
                "per-node config selection is off: no Kubernetes API access "
                "(not in a cluster and no KUBECONFIG)"
            )
            return
        loop = asyncio.get_running_loop()

        def on_value(value: str | None) -> None:
            loop.call_soon_threadsafe(self._seen, value)
            mailbox.post_threadsafe(Hint.LABEL, value)

        def on_error(message: str) -> None:
            logger.warning("node label watch: {message}", message=message)

        self._watch = NodeLabelWatch(
            api=access.named("nvidia-device-plugin"),
            node_name=flags.node_name,
            label=flags.node_label,
            on_value=on_value,
            on_error=on_error,
        )
        logger.info(
            "watching label {label} of node {node} through {source}",
            label=flags.node_label,
            node=flags.node_name,
            source=access.source,
        )

    @property
    def enabled(self) -> bool:
        return self._watch is not None

    def _seen(self, value: str | None) -> None:
        self.value = value
        self.first_value.set()

    def start(self) -> None:
        if self._watch is not None:
            self._watch.start()

    async def initial(self, timeout: float, *, stopping: asyncio.Event) -> str | None:
        """The label value from the first successful list, or None after `timeout`.

        Waiting a little at start-up avoids serving the default config for a
        moment and then switching, which would flap the node's capacity. A stop
        request ends the wait at once.
        """
        if self._watch is None:
            return None
        first = asyncio.ensure_future(self.first_value.wait())
        stop = asyncio.ensure_future(stopping.wait())
        try:
            await asyncio.wait({first, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (first, stop):
                waiter.cancel()
        if not self.first_value.is_set() and not stopping.is_set():
            logger.warning(
                "no answer from the Kubernetes API within {t}s; starting without the node label",
                t=timeout,
            )
        return self.value

    async def stop(self) -> None:
        if self._watch is not None:
            await asyncio.to_thread(self._watch.stop, 5.0)
