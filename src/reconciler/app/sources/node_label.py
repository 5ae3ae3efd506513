"""This node's config label and GPU cordon annotation, from the Kubernetes API, as hints.

The watch itself (`kube.node_watch`) runs in its own thread with bounded
timeouts and reports every value it reads; this module only bridges those
reports into the mailbox (`LABEL` for the config label, `CORDON` for the
`nvidia.com/gpu.cordon` annotation) and decides, once, whether the node can
be watched at all. One watch serves both: the annotation costs no request.
An API server that is unreachable never stops the plugin from serving: the
last values read (or none) stay in effect.

The node is watched whenever the plugin has a node name and API access.
With a config directory the label is needed before the first plan, so the
watch (and the Kubernetes client, half a second to import) starts before
it. Without one only the annotation is read, and the client is loaded off
the event loop once the first pass is over (`start_late`): a node that
selects no config by label registers as fast as before, and a cordon is
applied within moments of the first list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from loguru import logger

from foundation.errors import PluginError
from kube.configured import api_configured
from reconciler import on_demand
from reconciler.app.supervisor import RUNNING, Condition, RunState
from reconciler.core.mailbox import Hint, Mailbox
from settings import EffectiveConfig
from states.cordon import CORDON_ANNOTATION

if TYPE_CHECKING:
    from kube.node_watch import NodeLabelWatch

NOT_STARTED = "not started yet"


class NodeLabelSource:
    """Starts the watch when it can; `first_value` is set once a list succeeded."""

    def __init__(self, *, config: EffectiveConfig, env: Mapping[str, str], mailbox: Mailbox):
        self._watch: NodeLabelWatch | None = None
        self._env = env
        self._mailbox = mailbox
        self._node = config.flags.node_name
        self._label = config.flags.node_label
        self.selects_config = bool(config.flags.config_directory)
        self.first_value = asyncio.Event()
        self.value: str | None = None
        self.annotation: str | None = None
        # Why the node is not watched (shown on /state for the annotation); None while it is.
        self.off: str | None = NOT_STARTED
        self._stopped = False

    def _open(self) -> None:
        """Make the watch, or say once why there is none."""
        if not self._node:
            self._say_off("no --node-name (NODE_NAME) given")
            return
        if not api_configured(self._env):
            self._say_off("no Kubernetes API access (not in a cluster and no KUBECONFIG)")
            return
        # The Kubernetes client costs about half a second to import: see the
        # module docstring for who pays for it when.
        try:
            access = on_demand.api_access(self._env)
        except PluginError as err:
            self._say_off(str(err), unusable=True)
            return
        if access is None:
            self._say_off("no Kubernetes API access (not in a cluster and no KUBECONFIG)")
            return
        loop = asyncio.get_running_loop()
        mailbox, selects = self._mailbox, self.selects_config

        def on_value(value: str | None) -> None:
            # The hint first: whoever `_seen` wakes finds it already posted.
            if selects:
                mailbox.post_threadsafe(Hint.LABEL, value)
            loop.call_soon_threadsafe(self._seen, value)

        def on_annotation(value: str | None) -> None:
            loop.call_soon_threadsafe(self._noted, value)
            mailbox.post_threadsafe(Hint.CORDON, value)

        def on_error(message: str) -> None:
            logger.warning("node label watch: {message}", message=message)

        self._watch = on_demand.node_label_watch()(
            api=access.named("nvidia-device-plugin"),
            node_name=self._node,
            label=self._label,
            on_value=on_value,
            on_error=on_error,
            annotation=CORDON_ANNOTATION,
            on_annotation=on_annotation,
        )
        self.off = None
        what = f"label {self._label} and " if selects else ""
        logger.info(
            "watching {what}annotation {annotation} of node {node} through {source}",
            what=what,
            annotation=CORDON_ANNOTATION,
            node=self._node,
            source=access.source,
        )

    def _say_off(self, reason: str, *, unusable: bool = False) -> None:
        self.off = reason
        if self.selects_config:
            log = logger.warning if unusable else logger.info
            log("per-node config selection is off: {reason}", reason=reason)
        else:
            # Only the annotation is lost, which nobody may use: said, not warned.
            log = logger.info if unusable else logger.debug
            log("annotation {a} is not read: {reason}", a=CORDON_ANNOTATION, reason=reason)

    @property
    def enabled(self) -> bool:
        return self._watch is not None

    def _seen(self, value: str | None) -> None:
        self.value = value
        self.first_value.set()

    def _noted(self, value: str | None) -> None:
        self.annotation = value

    def start(self) -> None:
        """With a config directory: open the watch (loading the client) and start its thread."""
        if self.selects_config and self._watch is None:
            self._open()
        if self._watch is not None:
            self._watch.start()

    async def start_late(self, stopping: asyncio.Event) -> None:
        """Open and start the watch that was left for after the first pass (no config directory)."""
        if self.selects_config or self._watch is not None:
            return
        if not self._node or not api_configured(self._env):
            self._open()  # says why not, and loads nothing
            return
        # The import runs in a thread, so the loop keeps serving the kubelet meanwhile.
        await asyncio.to_thread(on_demand.node_label_watch)
        if stopping.is_set():
            return
        self._open()
        self.start()

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

    async def stop(self, grace: float = 5.0) -> bool:
        """Stop the watch's thread; False when it did not end within `grace`."""
        self._stopped = True
        if self._watch is None:
            return True
        return await asyncio.to_thread(self._watch.stop, grace)

    def condition(self) -> Condition:
        """What `/state` shows of the watch's thread (`runnables`)."""
        watch = self._watch
        if watch is None:
            if self.off == NOT_STARTED:
                if self._stopped:
                    return Condition(RunState.STOPPED, self.off)
                # Without a config directory it is opened once the first pass is over.
                later = None if self.selects_config else "opened once the first pass is over"
                return Condition(RunState.PENDING, later or self.off)
            return Condition(RunState.STOPPED, self.off)  # why the node is not watched
        if watch.running:
            return RUNNING
        if self._stopped:
            return Condition(RunState.STOPPED)
        return Condition(RunState.FAILED, "its thread ended")
