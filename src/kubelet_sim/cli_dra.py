"""`kubelet-sim prepare` / `unprepare`: the kubelet's DRA calls, from a shell.

Like `allocate`, each command finds what it needs in the snapshot file of the
serving simulator (`--dir`): the DRA driver's endpoint and the service version
chosen when it registered. It then dials that endpoint as the kubelet does, makes
one NodePrepareResources or NodeUnprepareResources call for the claims given
(`--claim NAMESPACE/NAME/UID`, repeatable) and prints the response as JSON.

`prepare --create NAMESPACE/NAME --pool NODE --device gpu-0 ...` first plays
the scheduler's part: it creates that ResourceClaim in the Kubernetes API
(`--kubeconfig`, else KUBECONFIG) allocated to those devices of the driver's
pool, with `--config JSON` as its opaque driver parameters, and then prepares
it with the others. A claim that failed, or that the plugin did not answer, is
one line on stderr and exit status 1, after the response is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from google.protobuf.message import Message

from kube import on_demand
from kube.claim_values import AllocatedDevice, OpaqueConfig
from kubelet.dra.types import ClaimRef
from kubelet_sim.cli_support import CliError, load_snapshot, print_message, run_call
from kubelet_sim.dra_client import DraClient
from kubelet_sim.model import DraDriverView, Snapshot

REQUEST = "gpu"  # the request name a claim made by `--create` asks under


def claim_ref(text: str) -> ClaimRef:
    """`NAMESPACE/NAME/UID` -> ClaimRef (argparse type)."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME/UID")
    namespace, name, uid = parts
    return ClaimRef(namespace=namespace, uid=uid, name=name)


def claim_name(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` -> (namespace, name) (argparse type)."""
    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/NAME")
    return parts[0], parts[1]


def parameters(text: str) -> dict[str, object]:
    """`--config`: a JSON object (argparse type)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--config is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--config must be a JSON object")
    return value


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
            default=[],
            metavar="NAMESPACE/NAME/UID",
            help="a ResourceClaim to pass (repeatable)",
        )
        command.add_argument(
            "--timeout", type=float, default=5.0, help="dial and call timeout in seconds"
        )
        command.set_defaults(run=run)
        if name == "prepare":
            _add_create(command)


def _add_create(command: argparse.ArgumentParser) -> None:
    group = command.add_argument_group("creating the claim first (as the scheduler would)")
    group.add_argument(
        "--create",
        type=claim_name,
        metavar="NAMESPACE/NAME",
        help="create this ResourceClaim, allocated to --device, and prepare it too",
    )
    group.add_argument(
        "--device",
        dest="devices",
        action="append",
        default=[],
        help="a device of the driver's pool to allocate, e.g. gpu-0 (repeatable)",
    )
    group.add_argument("--pool", help="the pool the devices are in: the plugin's node name")
    group.add_argument(
        "--config", type=parameters, help="opaque driver parameters, e.g. a GpuConfig as JSON"
    )
    group.add_argument("--kubeconfig", help="the Kubernetes API to create it in (else KUBECONFIG)")


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
        lines.extend(_health_lines(driver))
    return lines


def _health_lines(driver: DraDriverView) -> list[str]:
    """The devices of the driver's latest health list, one a line; nothing without a stream."""
    if not driver.health_service:
        return []
    lines = [f"  health  service={driver.health_service}  lists={driver.health_lists}"]
    width = max((len(f"{d.pool}/{d.device}") for d in driver.health), default=0)
    for device in driver.health:
        named = f"{device.pool}/{device.device}"
        line = f"  {named:<{width}}  {device.health:<9}  {device.message}"
        lines.append(line.rstrip())
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


def _created(args: argparse.Namespace) -> ClaimRef:
    """The claim `--create` asks for, made in the API; CliError saying why it could not be."""
    if not args.devices or not args.pool:
        raise CliError("--create needs --pool and at least one --device")
    namespace, name = args.create
    results = [AllocatedDevice(REQUEST, args.driver, args.pool, device) for device in args.devices]
    config = [OpaqueConfig((), args.driver, args.config)] if args.config is not None else []
    try:
        # Only this option talks to the Kubernetes API: the client loads here.
        api = on_demand.api_access(os.environ, kubeconfig=args.kubeconfig)
        if api is None:
            raise CliError("--create needs the Kubernetes API: --kubeconfig or KUBECONFIG")
        claim = on_demand.create_allocated_claim(
            api, namespace, name, results, config=config, device_class=args.driver,
            timeout=args.timeout,
        )  # fmt: skip
    except on_demand.kube_error() as exc:  # loads the client only once something was raised
        raise CliError(str(exc)) from exc
    return ClaimRef(namespace=namespace, uid=claim.uid, name=name)


def _call(args: argparse.Namespace, method: str, *, prepare: bool) -> int:
    creating = prepare and args.create is not None
    if not args.claims and not creating:
        raise CliError("no claim given: --claim NAMESPACE/NAME/UID" + (
            " or --create NAMESPACE/NAME" if prepare else ""))  # fmt: skip
    view = _driver(args.dir, args.driver)
    claims: list[ClaimRef] = list(args.claims)
    if creating:
        claims.append(_created(args))
    timeout: float = args.timeout

    async def run() -> Message:
        client = await DraClient.connect(
            Path(view.endpoint), service=view.service, dial_timeout=timeout, call_timeout=timeout
        )
        async with client:
            if prepare:
                return await client.prepare(claims)
            return await client.unprepare(claims)

    response = run_call(run)
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
