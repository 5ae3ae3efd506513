"""`kubelet-sim prepare` / `unprepare`: the kubelet's DRA calls, from a shell.

Like `allocate`, each command finds what it needs in the snapshot file of the
serving simulator (`--dir`): the DRA driver's endpoint and the service version
chosen when it registered. It then dials that endpoint as the kubelet does, makes
one NodePrepareResources or NodeUnprepareResources call for the claims given
(`--claim NAMESPACE/NAME/UID`, repeatable) and prints the response as JSON. Creating
the ResourceClaim objects those claims name is the caller's business. A claim
that failed, or that the plugin did not answer, is one line on stderr and exit
status 1, after the response is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import Message

from kubelet.dra.types import ClaimRef
from kubelet.simulator.cli_support import CliError, load_snapshot, print_message
from kubelet.simulator.client import PluginCallError
from kubelet.simulator.dra_client import DraClient
from kubelet.simulator.model import DraDriverView, Snapshot


def claim_ref(text: str) -> ClaimRef:
    """`NAMESPACE/NAME/UID` -> ClaimRef (argparse type)."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME/UID")
    namespace, name, uid = parts
    return ClaimRef(namespace=namespace, uid=uid, name=name)


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_dir: Callable[[argparse.ArgumentParser], None],
) -> None:
    for name, help_text, run in (
        ("prepare", "call NodePrepareResources on a registered DRA plugin", _run_prepare),
        ("unprepare", "call NodeUnprepareResources on a registered DRA plugin", _run_unprepare),
    ):
        command = commands.add_parser(name, help=help_text)
        add_dir(command)
        command.add_argument("--driver", required=True, help="DRA driver name, e.g. gpu.nvidia.com")
        command.add_argument(
            "--claim",
            dest="claims",
            type=claim_ref,
            action="append",
            required=True,
            metavar="NAMESPACE/NAME/UID",
            help="a ResourceClaim to pass (repeatable)",
        )
        command.add_argument(
            "--timeout", type=float, default=5.0, help="dial and call timeout in seconds"
        )
        command.set_defaults(run=run)


def dra_lines(snapshot: Snapshot) -> list[str]:
    """The DRA part of `kubelet-sim list`; nothing when the simulator watches no registry."""
    if not snapshot.registry:
        return []
    lines = [f"DRA plugins registry {snapshot.registry}"]
    if not snapshot.dra_drivers:
        lines.append("no DRA driver registered")
    for driver in snapshot.dra_drivers:
        state = "registered" if driver.registered else "unregistered"
        lines.append(
            f"{driver.name}  endpoint={driver.endpoint}  {state}  service={driver.service}"
            f"  versions={','.join(driver.versions)}  registrations={driver.registrations}"
        )
    return lines


def _driver(directory: Path, name: str) -> DraDriverView:
    snapshot = load_snapshot(directory)
    if not snapshot.registry:
        raise CliError(f"the simulator in {directory} watches no plugins_registry directory")
    view = snapshot.dra_driver(name)
    if view is None or not view.registered:
        raise CliError(f"DRA driver {name} is not registered with the simulator in {directory}")
    return view


def _run_prepare(args: argparse.Namespace) -> int:
    return _call(args, "NodePrepareResources", prepare=True)


def _run_unprepare(args: argparse.Namespace) -> int:
    return _call(args, "NodeUnprepareResources", prepare=False)


def _call(args: argparse.Namespace, method: str, *, prepare: bool) -> int:
    view = _driver(args.dir, args.driver)
    claims: list[ClaimRef] = args.claims
    timeout: float = args.timeout

    async def run() -> Message:
        client = await DraClient.connect(
            Path(view.endpoint), service=view.service, dial_timeout=timeout, call_timeout=timeout
        )
        async with client:
            if prepare:
                return await client.prepare(claims)
            return await client.unprepare(claims)

    try:
        response = asyncio.run(run())
    except PluginCallError as exc:
        raise CliError(f"{exc.method} failed: {exc.code.name}: {exc.details}") from exc
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    print_message(response)
    answers = getattr(response, "claims", {})
    failures = [
        f"{method}: claim {claim.uid}: "
        + (answers[claim.uid].error if claim.uid in answers else "no answer from the plugin")
        for claim in claims
        if claim.uid not in answers or answers[claim.uid].error
    ]
    for failure in failures:
        print(f"kubelet-sim: {failure}", file=sys.stderr)
    return 1 if failures else 0
