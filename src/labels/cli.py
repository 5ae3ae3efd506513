"""``gpu-feature-discovery``: label the node's GPUs for Node Feature Discovery.

Reads the same config (file, or the ConfigMap directory chosen by the node
label) and the same device model as the plugin, writes the label catalog to
the NFD features file (or stdout, or another `LabelSink`), and keeps it
current: every ``--sleep-interval``, and after SIGHUP or a config change with
a fresh configuration. Exit codes: 0 after ``--oneshot`` or on
SIGINT/SIGTERM/SIGQUIT; 1 with one line on stderr for an invalid
configuration, or with an error record when labelling fails.

`serve` is the whole command with its outside world injected (the waiter, the
device library, the node-label value for config selection, the API sinks),
so tests drive it in-process without signals or sleeping. `main` wires in the
Kubernetes-backed parts, loading the Kubernetes client only when one is
used (`labels.on_demand`): the sinks (`labels.node_sink`: the NodeFeature object and the Node's
own labels) and, with ``--config-directory``, the node's config label
(`labels.config_label`), whose watch the Node sink shares.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from loguru import logger

from foundation import logs
from foundation.version import version
from labels import on_demand
from labels.config_label import follow_config_label, wait_first_label
from labels.endpoint import LabellerTelemetry, start_telemetry
from labels.errors import LabelError
from labels.flags import GFD_FLAG_SET, SetValue, help_text, parse_arguments
from labels.options import ConfigChoice, GfdOptions, choose_config, resolve_options
from labels.output import FileSink, LabelSink, StreamSink
from labels.runner import LibraryOpener, default_opener, run
from labels.waiting import SignalWaiter, Waiter, Wake
from settings import ConfigError, wants_help, wants_version

if TYPE_CHECKING:
    from kube.label_follower import NodeLabelFollower
    from kube.object_watch import ObjectWatch
    from labels.node_sink import KubeSinks

__all__ = ["SinkFactory", "build_sinks", "main", "serve"]

PROGRAM = "gpu-feature-discovery"
SinkFactory = Callable[[GfdOptions], LabelSink]


def build_sinks(
    options: GfdOptions,
    *,
    node_feature: SinkFactory | None = None,
    node_labels: SinkFactory | None = None,
) -> list[LabelSink]:
    """The sinks a run publishes to.

    ``node_feature`` builds the NodeFeature-object sink and ``node_labels`` the
    sink that sets the labels on the Node itself; both come from the
    Kubernetes layer and are absent when it is not wired in.

    Raises:
        ConfigError: the NodeFeature API is asked for but not available.
    """
    sinks: list[LabelSink] = []
    if options.use_node_feature_api:
        if node_feature is None:
            raise ConfigError(
                "publishing a NodeFeature object is not available; "
                "set --use-node-feature-api=false to write the features file",
                origin=options.origins.get("use_node_feature_api", ""),
                path="--use-node-feature-api",
            )
        sinks.append(node_feature(options))
    elif options.output_file:
        sinks.append(FileSink(options.output_file))
    else:
        sinks.append(StreamSink())
    if options.write_node_labels:
        if node_labels is None:
            logger.warning("Writing labels to the Node object is not available; skipping it")
        else:
            sinks.append(node_labels(options))
    return sinks


def _fingerprint(
    values: Mapping[str, SetValue], first: ConfigChoice, label_value: Callable[[], str | None]
) -> Callable[[], Hashable]:
    def current() -> Hashable:
        if not values.get("config_directory"):
            return first.fingerprint()
        try:
            chosen = choose_config(values, label_value=label_value(), current=first.name)
        except ConfigError as error:
            return ("error", str(error))
        return chosen.fingerprint()

    return current


def serve(
    argv: Sequence[str],
    env: Mapping[str, str],
    waiter: Waiter,
    *,
    opener: LibraryOpener = default_opener,
    label_value: Callable[[], str | None] = lambda: None,
    node_feature: SinkFactory | None = None,
    node_labels: SinkFactory | None = None,
    now: Callable[[], float] = time.time,
    configure_logging: bool = True,
    telemetry: LabellerTelemetry | None = None,
) -> int:
    """Run the command until it exits; returns the exit code."""
    current: str | None = None
    logging_ready = not configure_logging
    while True:
        try:
            values = parse_arguments(argv, env)
            choice = choose_config(values, label_value=label_value(), current=current)
            # Taken before the file is read, so an edit made while loading is not missed.
            waiter.watch(_fingerprint(values, choice, label_value))
            options = resolve_options(values, choice)
            if not logging_ready:
                logs.configure(options.config.flags.log_format.value)
            sinks = build_sinks(options, node_feature=node_feature, node_labels=node_labels)
            if telemetry is not None:
                sinks.append(telemetry.sink(options))
            if not logging_ready:
                logging_ready = True
                logger.info("{} {} starting", PROGRAM, version())
        except ConfigError as error:
            for line in error.lines():
                print(f"{PROGRAM}: {line}", file=sys.stderr, flush=True)
            return 1
        current = choice.name
        if choice.reason:
            logger.info("config selection: {reason}", reason=choice.reason)
        logger.info(
            "Running with config: {config}",
            config=json.dumps(options.describe(), sort_keys=True, default=str),
        )
        try:
            wake = run(options, sinks, waiter, opener=opener, now=now)
        except LabelError as error:
            logger.error("{program}: {error}", program=PROGRAM, error=str(error))
            return 1
        if wake is Wake.STOP:
            logger.info("Exiting")
            return 0
        logger.info("Reloading the configuration and relabelling")


class _KubeSinksOnDemand:
    """`labels.node_sink.KubeSinks`, built on first use: the client costs a quarter second."""

    def __init__(self) -> None:
        self._sinks: KubeSinks | None = None
        self.node_watch: ObjectWatch | None = None  # the config label's, when it is followed

    def _get(self) -> KubeSinks:
        if self._sinks is None:
            self._sinks = on_demand.kube_sinks()(node_watch=self.node_watch)
        return self._sinks

    def node_feature(self, options: GfdOptions) -> LabelSink:
        return self._get().node_feature(options)

    def node_labels(self, options: GfdOptions) -> LabelSink:
        return self._get().node_labels(options)

    def close(self) -> None:
        if self._sinks is not None:
            self._sinks.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if wants_help(args):
        print(help_text())
        return 0
    if wants_version(args):
        print(GFD_FLAG_SET.version_text(version()))
        return 0
    waiter = SignalWaiter()
    waiter.block_signals()
    env = dict(os.environ)
    try:
        # After blocking the signals: the endpoint's thread must not take them.
        telemetry = start_telemetry(args, env)
    except ConfigError as error:
        print(f"{PROGRAM}: {error}", file=sys.stderr, flush=True)
        return 1
    kube = _KubeSinksOnDemand()
    values = _values(args, env)
    selects = values is not None and bool(values.get("config_directory"))
    follower: NodeLabelFollower | None = None
    try:
        if values is not None and selects:
            # Selection is said in the log before the first run, so the log is set
            # up here; its format comes from the command line or environment only.
            log_format = values.get("log_format")
            logs.configure(str(log_format.value) if log_format is not None else "text")
            logger.info("{} {} starting", PROGRAM, version())
            follower = follow_config_label(values, env)
            if follower is not None:
                wait_first_label(follower)
                kube.node_watch = follower.object_watch
        return serve(
            args,
            env,
            waiter,
            label_value=follower.value if follower is not None else lambda: None,
            node_feature=kube.node_feature,
            node_labels=kube.node_labels,
            telemetry=telemetry,
            configure_logging=not selects,
        )
    finally:
        kube.close()
        if follower is not None:
            follower.stop()
        if telemetry is not None:
            telemetry.stop()


def _values(args: Sequence[str], env: Mapping[str, str]) -> dict[str, SetValue] | None:
    try:
        return parse_arguments(args, env)
    except ConfigError:
        return None  # the run reports it, with the other problems


if __name__ == "__main__":
    sys.exit(main())
