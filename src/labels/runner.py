"""The labelling loop: one run per configuration, passes inside a run.

A *run* starts from a freshly loaded configuration: it opens the device
library, takes the timestamp once (every pass of a run writes the same
``gfd.timestamp``, as in the reference) and then labels in passes until the
wait says otherwise. ``--oneshot`` stops after the first pass. A reload
(SIGHUP or a changed config) ends the run and starts a new one; a stop ends
it and the command exits 0. Any `LabelError` ends the command with exit 1.

When a periodic run ends for any reason, its sinks withdraw the labels (the
features file is removed) unless the run was ``--oneshot`` or had an infinite
interval: labels written to last are left in place.

A sink that reaches the Kubernetes API may fail with `PublishError` while the
API server is away. Every sink is still offered the pass; the failed pass is
then repeated after a jittered backoff (at most the sleep interval; also with
``--sleep-interval=infinite``), so labelling survives an API outage without a
restart and a fleet does not retry in lockstep. With ``--oneshot`` the error
ends the command with exit 1, as the reference does.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from loguru import logger

from devices.backends import open_library
from devices.errors import DiscoveryError, NvmlUnavailable, ProfileError
from devices.library import DeviceLibrary
from devices.model import Inventory
from foundation.backoff import Backoff
from kube.pacing import jittered
from labels.catalog import compute_labels
from labels.errors import LabelError
from labels.host import gather_facts
from labels.options import GfdOptions
from labels.output import LabelSink, PublishError
from labels.sharing import SharingView
from labels.waiting import Waiter, Wake
from resources.gpu_filter import select_gpus
from settings.gpu_selector import selector_of

__all__ = ["LibraryOpener", "default_opener", "label_once", "run"]

LibraryOpener = Callable[[GfdOptions], DeviceLibrary]
RETRY_BACKOFF = Backoff(initial=1.0, cap=300.0)
_LIBRARY_ERRORS = (NvmlUnavailable, DiscoveryError, ProfileError)


def default_opener(options: GfdOptions) -> DeviceLibrary:
    flags = options.config.flags
    return open_library(
        flags.mock_nvml or None,
        driver_root=flags.driver_root_ctr_path,
        strategy=flags.device_discovery_strategy,
    )


def _start(options: GfdOptions, opener: LibraryOpener) -> DeviceLibrary | None:
    """The started library, or None (a node without GPUs) if allowed to fail."""
    try:
        library = opener(options)
        library.init()
    except _LIBRARY_ERRORS as error:
        if options.config.flags.fail_on_init_error:
            raise LabelError(f"failed to start the device library: {error}") from error
        logger.warning("Labelling as a node without GPUs: the device library failed: {}", error)
        return None
    return library


def _inventory(library: DeviceLibrary | None) -> Inventory | None:
    if library is None:
        return None
    try:
        return library.inventory()
    except _LIBRARY_ERRORS as error:
        raise LabelError(f"error discovering devices: {error}") from error


def _selected(
    options: GfdOptions, inventory: Inventory | None, warned: set[str] | None
) -> Inventory | None:
    """Only the GPUs --include-devices/--exclude-devices let the node use are labelled.

    Each warning is logged once per run (``warned`` holds those said already).
    """
    if inventory is None:
        return None
    selection = select_gpus(inventory, selector_of(options.config))
    for warning in selection.warnings:
        if warned is None or warning not in warned:
            logger.warning("{}", warning)
            if warned is not None:
                warned.add(warning)
    return selection.inventory


def label_once(
    options: GfdOptions,
    library: DeviceLibrary | None,
    timestamp: int | None,
    warned: set[str] | None = None,
) -> dict[str, str]:
    """One pass: discover, keep the selected GPUs, gather the host facts, compute every label."""
    inventory = _selected(options, _inventory(library), warned)
    facts = gather_facts(
        inventory,
        machine_type_file=options.machine_type_file,
        machine_type_file_set=options.machine_type_file_set,
        sysfs_root=Path(options.sysfs_root),
        simulated=bool(options.config.flags.mock_nvml),
    )
    return compute_labels(
        inventory,
        facts,
        mig_strategy=options.config.flags.mig_strategy,
        sharing=SharingView.of(options.config.sharing),
        timestamp=timestamp,
    )


def _publish(sinks: Sequence[LabelSink], labels: dict[str, str]) -> PublishError | None:
    """Offer the labels to every sink; the first transient failure, if any."""
    failed: PublishError | None = None
    for sink in sinks:
        try:
            sink.publish(labels)
        except PublishError as error:
            failed = failed or error
    return failed


def run(
    options: GfdOptions,
    sinks: Sequence[LabelSink],
    waiter: Waiter,
    *,
    opener: LibraryOpener = default_opener,
    now: Callable[[], float] = time.time,
    rng: random.Random | None = None,
) -> Wake:
    """Label until the waiter ends the run; returns `Wake.STOP` or `Wake.RELOAD`.

    Raises:
        LabelError: the device library could not start (with fail-on-init-error),
            a pass failed, or (with --oneshot) a sink could not publish.
    """
    periodic = not options.oneshot and math.isfinite(options.sleep_interval)
    rng = rng if rng is not None else random.Random()
    library = _start(options, opener)
    timestamp = None if options.no_timestamp else int(now())
    failures = 0
    warned: set[str] = set()
    try:
        while True:
            labels = label_once(options, library, timestamp, warned)
            failed = _publish(sinks, labels)
            if failed is None:
                failures = 0
                timeout = options.sleep_interval
                logger.info("Wrote {count} labels", count=len(labels))
                if options.oneshot:
                    return Wake.STOP
            elif options.oneshot:
                raise failed
            else:
                timeout = min(options.sleep_interval, jittered(RETRY_BACKOFF, failures, rng))
                failures += 1
                logger.warning(
                    "{error}; labelling again in {delay:.1f}s", error=str(failed), delay=timeout
                )
            wake = waiter.wait(timeout)
            if wake is not Wake.TIMER:
                return wake
    finally:
        if library is not None:
            library.shutdown()
        if periodic:
            for sink in sinks:
                sink.withdraw()
