"""`kubelet-sim`: run the kubelet simulator, or poke a running one from a shell.

`serve` runs the simulator in the foreground and prints one line per event; it
plays the kubelet's DRA side too, on the plugins_registry directory beside the
device-plugin directory (`--registry-dir`, or `--no-registry`). The other commands
are one-shot: they read the snapshot file the serving process keeps in the
device-plugin directory, and `allocate`/`preferred`/`options` dial the plugin
socket named there directly, as the kubelet would, printing the response as JSON
with the protobuf field names (`prepare`/`unprepare`, in `cli_dra`, do the same for
a DRA driver). All formatting lives here; the engine only produces events and
snapshots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.message import Message

from foundation.version import version
from kubelet_sim import cli_dra
from kubelet_sim.cli_support import PROG, CliError, load_snapshot, print_message, run_call
from kubelet_sim.client import PluginClient
from kubelet_sim.engine import DEFAULT_DIRECTORY, KubeletSimulator, SimulatorError
from kubelet_sim.model import Event, ResourceView, Snapshot

__all__ = ["PROG", "CliError", "format_event", "format_listing", "main", "parser", "registry_of"]

#: Where `serve` watches for DRA plugins unless told: beside the device-plugin
#: directory, as /var/lib/kubelet/plugins_registry is beside .../device-plugins.
REGISTRY_NAME = "plugins_registry"

_Call = Callable[[PluginClient], Awaitable[Message]]


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except CliError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return code


def parser() -> argparse.ArgumentParser:
    """The command line: every subcommand and its arguments."""
    root = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "A stand-in for the kubelet's device manager and DRA manager. `serve` accepts "
            "device-plugin registrations on DIR/kubelet.sock and follows each plugin's "
            "ListAndWatch stream, and registers the DRA plugins in the plugins_registry "
            "directory; the other commands inspect a serving simulator or call a "
            "registered plugin directly."
        ),
    )
    root.add_argument("-v", "--version", action="version", version=f"{PROG} version {version()}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="serve kubelet.sock until SIGINT/SIGTERM (SIGHUP simulates a kubelet restart)",
        description=(
            "Serve v1beta1.Registration on DIR/kubelet.sock and print one line per event. "
            "Registers the DRA kubelet plugins whose registration sockets appear in the "
            "plugins_registry directory. SIGHUP simulates a kubelet restart (every socket "
            "in DIR is deleted and kubelet.sock is created again; DRA plugins are dialed "
            "again). SIGINT/SIGTERM stop cleanly, exit status 0."
        ),
    )
    _add_dir(serve)
    registry = serve.add_mutually_exclusive_group()
    registry.add_argument(
        "--registry-dir",
        type=Path,
        help=f"where DRA plugins register (default: {REGISTRY_NAME} beside DIR)",
    )
    registry.add_argument(
        "--no-registry", action="store_true", help="do not play the kubelet's DRA side"
    )
    serve.add_argument("--quiet", action="store_true", help="do not print events")
    serve.set_defaults(run=_run_serve)

    listing = commands.add_parser("list", help="show registered resources and their devices")
    _add_dir(listing)
    listing.add_argument("--json", action="store_true", help="print the full snapshot as JSON")
    listing.set_defaults(run=_run_list)

    allocate = commands.add_parser(
        "allocate", help="call Allocate on a registered plugin for one container"
    )
    _add_call_args(allocate)
    allocate.add_argument("ids", nargs="+", metavar="ID", help="device IDs to allocate")
    allocate.set_defaults(run=_run_allocate)

    preferred = commands.add_parser(
        "preferred", help="call GetPreferredAllocation on a registered plugin"
    )
    _add_call_args(preferred)
    preferred.add_argument("--size", type=int, required=True, help="allocation size")
    preferred.add_argument(
        "--available",
        nargs="+",
        metavar="ID",
        help="available device IDs (default: the resource's healthy devices)",
    )
    preferred.add_argument(
        "--must-include", nargs="+", metavar="ID", default=[], help="IDs that must be chosen"
    )
    preferred.set_defaults(run=_run_preferred)

    options = commands.add_parser(
        "options", help="call GetDevicePluginOptions on a registered plugin"
    )
    _add_call_args(options)
    options.set_defaults(run=_run_options)
    cli_dra.add_commands(commands, _add_dir)
    return root


def _add_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIRECTORY,
        help=f"device-plugin directory (default: {DEFAULT_DIRECTORY})",
    )


def _add_call_args(parser: argparse.ArgumentParser) -> None:
    _add_dir(parser)
    parser.add_argument("--resource", required=True, help="resource name, e.g. nvidia.com/gpu")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="dial and call timeout in seconds"
    )


# -- serve ---------------------------------------------------------------------------


def registry_of(args: argparse.Namespace) -> Path | None:
    """The plugins_registry `serve` watches: as given, beside DIR by default, or none."""
    if args.no_registry:
        return None
    given: Path | None = args.registry_dir
    return given if given is not None else args.dir.absolute().parent / REGISTRY_NAME


def _run_serve(args: argparse.Namespace) -> int:
    return asyncio.run(_serve(args.dir, registry_of(args), quiet=args.quiet))


async def _serve(directory: Path, registry: Path | None, *, quiet: bool) -> int:
    on_event = None if quiet else _print_event
    simulator = KubeletSimulator(directory, on_event=on_event, registry_dir=registry)
    stop = asyncio.Event()
    restart = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, restart.set)
    try:
        try:
            await simulator.start()
        except (SimulatorError, ValueError, OSError) as exc:
            raise CliError(str(exc)) from exc
        while not stop.is_set():
            await _first_of(stop, restart)
            if restart.is_set() and not stop.is_set():
                restart.clear()
                await simulator.restart()
    finally:
        await simulator.stop()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(signum)
    return 0


async def _first_of(*events: asyncio.Event) -> None:
    waiters = {asyncio.create_task(e.wait()) for e in events}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.wait(waiters)


def format_event(event: Event) -> str:
    stamp = datetime.fromtimestamp(event.wall, UTC).isoformat(timespec="milliseconds")
    parts = [stamp.replace("+00:00", "Z"), event.kind.value]
    if event.resource:
        parts.append(event.resource)
    if event.device_count is not None:
        parts.append(f"devices={event.device_count}")
    if event.detail:
        parts.append(event.detail)
    return " ".join(parts)


def _print_event(event: Event) -> None:
    print(format_event(event), flush=True)


# -- list ----------------------------------------------------------------------------


def _run_list(args: argparse.Namespace) -> int:
    snapshot = load_snapshot(args.dir)
    if args.json:
        print(json.dumps(snapshot.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_listing(snapshot))
    return 0


def format_listing(snapshot: Snapshot) -> str:
    state = "serving" if snapshot.serving else "stopped"
    lines = [f"kubelet simulator in {snapshot.directory}: {state}, restarts={snapshot.restarts}"]
    if not snapshot.resources:
        lines.append("no device plugin registered")
    for view in snapshot.resources:
        lines.append(_resource_line(view))
        width = max((len(d.id) for d in view.devices), default=0)
        for device in view.devices:
            numa = ",".join(str(n) for n in device.numa_nodes) or "-"
            lines.append(f"  {device.id:<{width}}  {device.health:<9}  numa={numa}")
    lines.extend(cli_dra.dra_lines(snapshot))
    return "\n".join(lines)


def _resource_line(view: ResourceView) -> str:
    flags = [
        "registered" if view.registered else "unregistered",
        "streaming" if view.streaming else "no-stream",
    ]
    if view.options.get_preferred_allocation_available:
        flags.append("preferred-allocation")
    if view.options.pre_start_required:
        flags.append("pre-start")
    c = view.counters
    return (
        f"{view.name}  endpoint={view.endpoint}  {' '.join(flags)}  devices={len(view.devices)}"
        f"  registrations={c.registrations} lists={c.lists_received}"
        f" streams={c.streams_opened} closed={c.streams_closed} errors={c.stream_errors}"
    )


# -- calls on a plugin -----------------------------------------------------------------


def _run_allocate(args: argparse.Namespace) -> int:
    ids: list[str] = args.ids

    async def call(client: PluginClient) -> Message:
        return await client.allocate([ids])

    return _call_plugin(args, call)


def _run_preferred(args: argparse.Namespace) -> int:
    view = _resource(args.dir, args.resource)
    available: list[str] = (
        list(view.healthy_ids) if args.available is None else list(args.available)
    )
    must_include: list[str] = args.must_include
    size: int = args.size

    async def call(client: PluginClient) -> Message:
        return await client.preferred(available=available, must_include=must_include, size=size)

    return _call_plugin(args, call)


def _run_options(args: argparse.Namespace) -> int:
    async def call(client: PluginClient) -> Message:
        return await client.options()

    return _call_plugin(args, call)


def _call_plugin(args: argparse.Namespace, call: _Call) -> int:
    view = _resource(args.dir, args.resource)
    socket_path = args.dir / view.endpoint
    timeout: float = args.timeout

    async def run() -> Message:
        client = await PluginClient.connect(socket_path, dial_timeout=timeout, call_timeout=timeout)
        async with client:
            return await call(client)

    response = run_call(run)
    print_message(response)
    return 0


def _resource(directory: Path, name: str) -> ResourceView:
    view = load_snapshot(directory).resource(name)
    if view is None or not view.registered:
        raise CliError(f"resource {name} is not registered with the simulator in {directory}")
    return view


if __name__ == "__main__":
    raise SystemExit(main())
