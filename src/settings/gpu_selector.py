"""Which GPUs of the node the plugin, the labeller and the MPS daemon use at all.

``--include-devices`` and ``--exclude-devices`` (``INCLUDE_DEVICES``,
``EXCLUDE_DEVICES``, ``flags.plugin.includeDevices`` and
``flags.plugin.excludeDevices`` in the file) name GPUs as `settings.gpu_refs`
reads them. An empty include list means every GPU; the exclude list applies
after it and wins where both name a GPU. A warning about either list says
where it was given, so an operator knows which of flag, variable or file to
fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from settings.effective import EffectiveConfig
from settings.flags import FLAGS_BY_FIELD
from settings.gpu_refs import GpuRef, parse_list

__all__ = ["GpuSelector", "selector_of"]


@dataclass(frozen=True)
class GpuSelector:
    """The two lists, parsed, and where each was given (for warnings that say where to look).

    ``include_origin`` and ``exclude_origin`` are the ``<origin>: <key>``
    heads of the reference's message style (``command line: --exclude-devices``,
    ``/etc/config.yaml: flags.plugin.excludeDevices``).
    """

    include: tuple[GpuRef, ...] = ()
    exclude: tuple[GpuRef, ...] = ()
    include_origin: str = "--include-devices"
    exclude_origin: str = "--exclude-devices"

    @property
    def selects_all(self) -> bool:
        """Neither list names anything: every GPU is used."""
        return not self.include and not self.exclude

    @classmethod
    def of(cls, include: Iterable[str], exclude: Iterable[str], **origins: str) -> GpuSelector:
        """From canonical entries (what the settings hold); raises ValueError like `parse_list`."""
        return cls(parse_list(include), parse_list(exclude), **origins)


def selector_of(config: EffectiveConfig) -> GpuSelector:
    """The selector an effective config asks for, each list named as it was given."""

    def origin(field: str) -> str:
        spec = FLAGS_BY_FIELD[field]
        source = config.sources.get(field, "default")
        if source == "env":
            return f"environment: {spec.env[0]}"
        if source == "file":
            return f"{config.config_path}: {spec.file_key}"
        return f"command line: {spec.primary}" if source == "flag" else spec.primary

    flags = config.flags
    return GpuSelector.of(
        flags.include_devices,
        flags.exclude_devices,
        include_origin=origin("include_devices"),
        exclude_origin=origin("exclude_devices"),
    )
