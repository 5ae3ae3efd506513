"""IMEX channel discovery.

Channels are requested by ID (only `[]` or `[0]` are valid) and exist when
`/dev/nvidia-caps-imex-channels/channel<ID>` is a character device, looked up
first under the container-side dev root and then at the plain path. A channel
that is found is injected into every allocation of every resource; a missing
one is an error only when IMEX is required, otherwise it is skipped with a
warning (the reference logs it; here it is returned for the caller to report).
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.devnodes import imex_channel_path
from resources.errors import ResourceError
from resources.options import ResourceOptions, join_root


@dataclass(frozen=True)
class ImexDiscovery:
    channels: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def discover_imex_channels(options: ResourceOptions) -> ImexDiscovery:
    """Channels of `options.imex_channel_ids` present on the node, as decimal strings.

    Raises:
        ResourceError: a requested channel is missing and `imex_required` is set.
    """
    found: list[str] = []
    warnings: list[str] = []
    root = options.container_dev_root
    for channel_id in options.imex_channel_ids:
        channel = str(channel_id)
        path = imex_channel_path(channel)
        candidates = [join_root(root, path)]
        if candidates[0] != path:
            candidates.append(path)
        if any(options.is_char_device(candidate) for candidate in candidates):
            found.append(channel)
            continue
        message = f"requested IMEX channel channel{channel} does not exist"
        if options.imex_required:
            raise ResourceError(f"error querying IMEX channels: {message}")
        warnings.append(f"{message}; not injecting it")
    return ImexDiscovery(channels=tuple(found), warnings=tuple(warnings))
