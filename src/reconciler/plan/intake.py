"""The loop's side of reading its inputs: what was read, applied on the loop only.

`Intake` owns the NVML worker, the node's device library, the node label's
config choice, the desired state last read from valid inputs and the
standing rejection. Reading happens on the worker (`reconciler.plan.reading`) and
returns a `Reading`; `apply()` takes it on the loop's thread. That is the
only place any of these change, so `/state` never sees a half-applied read,
and a read that overran its deadline is dropped whole (a library it opened is
shut down on the worker).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from loguru import logger

from devices.library import DeviceLibrary
from foundation.errors import PluginError
from reconciler.plan.desired import Desired
from reconciler.plan.inputs import ConfigChoice, ConfigInputs, Loaded
from reconciler.plan.node import NodeLibrary, OpenLibrary
from reconciler.plan.reading import NvmlWorker, Reading, ReadTimeout, read
from settings.announce import announce


def _announce_selection(desired: Desired, previous: Desired | None) -> None:
    """One WARNING per GPU selection problem, when it first appears (not on every read)."""
    if desired.selection is None:
        return
    said = set(previous.selection.warnings) if previous and previous.selection else set()
    for warning in desired.selection.warnings:
        if warning not in said:
            logger.warning("{}", warning)
    left_out = [f"{gpu.index} ({gpu.uuid})" for gpu in desired.selection.left_out]
    before = previous.selection.left_out if previous and previous.selection else ()
    if left_out and desired.selection.left_out != before:
        logger.info("GPUs left out by --include-devices/--exclude-devices: {}", ", ".join(left_out))


class Intake:
    """The inputs as last read, and the worker they are read on."""

    def __init__(
        self,
        *,
        config: ConfigInputs,
        open_library: OpenLibrary,
        deadline: float,
    ) -> None:
        self._config = config
        self._open_library = open_library
        self.nvml = NvmlWorker(deadline)
        self.desired: Desired | None = None  # the last desired state read from valid inputs
        self.choice = ConfigChoice()
        self.node: NodeLibrary | None = None
        # The standing rejection (the error and the content it was about), so
        # the same bad file touched again is not reported again.
        self.rejected: str | None = None

    @property
    def library(self) -> DeviceLibrary | None:
        return None if self.node is None else self.node.library

    def same_label(self, value: str | None) -> bool:
        """Whether the node label still has `value` (and something was read with it)."""
        if value == self.choice.label and self.desired is not None:
            return True
        self.choice = replace(self.choice, label=value)
        return False

    async def read(self) -> Reading:
        """Config, devices and desired state, read on the worker (not applied yet)."""
        work = partial(
            read,
            inputs=self._config,
            choice=self.choice,
            held=self.node,
            open_library=self._open_library,
        )
        try:
            return await self.nvml.call(
                work, "reading the config and the devices", dropped=self._drop
            )
        except ReadTimeout as err:
            return Reading(Loaded(None, None, self.choice.selection, ""), None, error=err)

    def said_already(self, reading: Reading) -> bool:
        """The same content was rejected before: nothing new to say."""
        error = reading.error
        return error is not None and error.permanent and reading.rejected == self.rejected

    def differs(self, reading: Reading) -> bool:
        """Whether a successful read is an input change worth recording (compared by value)."""
        desired, current = reading.desired, self.desired
        assert desired is not None
        return (
            current is None
            or desired.config != current.config
            or desired.inventory != current.inventory
            # An edit that serves the same (a key added or removed that is
            # ignored) still changes what `/state` must warn about.
            or desired.warnings != current.warnings
            or self.rejected is not None  # a standing rejection needs clearing
        )

    def apply(self, reading: Reading) -> PluginError | None:
        """Take what a read found; returns its error, if any."""
        self._install(reading.node)
        selection = reading.loaded.selection
        if selection != self.choice.selection and selection is not None and selection.reason:
            logger.info("config selection: {reason}", reason=selection.reason)
        self.choice = replace(self.choice, selection=selection)
        if reading.error is not None:
            if reading.error.permanent:
                self.rejected = reading.rejected or str(reading.error)
            return reading.error
        desired = reading.desired
        assert desired is not None
        previous = self.desired
        if previous is not None and not self.differs(reading):
            return None  # the same inputs: the desired state in force stays as it is
        announce(desired.config, None if previous is None else previous.config)
        _announce_selection(desired, previous)
        for warning in desired.new_plan_warnings(previous):
            logger.warning("{}", warning)
        if not desired.allocators and (previous is None or previous.allocators):
            left_out = desired.selection is not None and desired.selection.left_out
            logger.info(
                "no GPUs {} on this node: serving no resources",
                "selected" if left_out else "found",
            )
        self.desired = desired
        if selection is not None:
            self.choice = replace(self.choice, current=selection.name)
        self.rejected = None
        return None

    def _install(self, node: NodeLibrary | None) -> None:
        held = self.node
        if node is None or node is held:
            return
        if held is not None and held.library is not node.library:
            self.nvml.submit(held.shutdown)
        self.node = node

    def _drop(self, late: Reading) -> None:
        """A read that came after its deadline: shut down a library nobody will use."""
        node, held = late.node, self.node
        if node is not None and (held is None or node.library is not held.library):
            self.nvml.submit(node.shutdown)

    async def close(self) -> None:
        node = self.node
        await self.nvml.close(node.shutdown if node is not None else lambda: None)
