"""The `kubelet-sim` command line, in this process (tests/e2e/kubelet_sim runs it as a process)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kubelet.dra.types import ClaimRef
from kubelet_sim.cli import format_listing, main, parser, registry_of
from kubelet_sim.cli_dra import claim_name, claim_ref, parameters
from kubelet_sim.model import DraDriverView, Snapshot


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for command in ("serve", "list", "allocate", "preferred", "options", "prepare", "unprepare"):
        assert command in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        pytest.param(
            ["--dir", "/var/lib/kubelet/device-plugins"],
            Path("/var/lib/kubelet/plugins_registry"),
            id="beside-the-device-plugin-directory",
        ),
        pytest.param(["--dir", "/x/dp", "--registry-dir", "/y/reg"], Path("/y/reg"), id="given"),
        pytest.param(["--dir", "/x/dp", "--no-registry"], None, id="off"),
    ],
)
def test_serve_watches_the_registry_beside_dir_unless_told(
    argv: list[str], expected: Path | None
) -> None:
    assert registry_of(parser().parse_args(["serve", *argv])) == expected


def test_serve_refuses_a_registry_and_no_registry_together(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--registry-dir", "/r", "--no-registry"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_claim_is_namespace_name_uid() -> None:
    assert claim_ref("gpu-test/pod-claim/0f1e") == ClaimRef("gpu-test", "0f1e", "pod-claim")


@pytest.mark.parametrize("text", ["ns/name", "ns/name/uid/extra", "ns//uid", "", "//"])
def test_a_claim_with_a_missing_or_extra_part_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not NAMESPACE/NAME/UID"):
        claim_ref(text)


def test_a_claim_to_create_is_namespace_name() -> None:
    assert claim_name("team-a/train") == ("team-a", "train")
    with pytest.raises(argparse.ArgumentTypeError, match="is not NAMESPACE/NAME"):
        claim_name("team-a/train/uid")


@pytest.mark.parametrize(
    ("text", "why"),
    [("{", "--config is not JSON"), ("[1]", "--config must be a JSON object")],
)
def test_opaque_config_must_be_a_json_object(text: str, why: str) -> None:
    assert parameters('{"kind": "GpuConfig"}') == {"kind": "GpuConfig"}
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        parameters(text)


def test_prepare_needs_a_driver_and_at_least_one_claim(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["prepare", "--dir", "/x"])
    assert exited.value.code == 2
    assert "--driver" in capsys.readouterr().err


def _snapshot(registry: str, *drivers: DraDriverView) -> Snapshot:
    return Snapshot(
        directory="/dp", serving=True, restarts=0, version=1, registry=registry, dra_drivers=drivers
    )


def test_listing_without_a_registry_has_no_dra_section() -> None:
    assert format_listing(_snapshot("")).splitlines() == [
        "kubelet simulator in /dp: serving, restarts=0",
        "no device plugin registered",
    ]


def test_listing_names_the_registry_and_each_driver() -> None:
    driver = DraDriverView(
        name="gpu.example.com",
        endpoint="/p/gpu.example.com/dra.sock",
        versions=("v1beta1.DRAPlugin",),
        service="v1beta1.DRAPlugin",
        socket="/r/gpu.example.com-reg.sock",
        registered=False,
        registrations=3,
    )
    assert format_listing(_snapshot("/r")).splitlines()[-2:] == [
        "DRA plugins registry /r",
        "no DRA driver registered",
    ]
    assert format_listing(_snapshot("/r", driver)).splitlines()[-1] == (
        "gpu.example.com  endpoint=/p/gpu.example.com/dra.sock  unregistered"
        "  service=v1beta1.DRAPlugin  versions=v1beta1.DRAPlugin  registrations=3"
    )


def test_a_snapshot_file_without_the_dra_keys_still_reads_with_the_dra_side_off() -> None:
    raw = _snapshot("").to_dict()
    del raw["registry"], raw["dra_drivers"]
    again = Snapshot.from_dict(raw)
    assert (again.registry, again.dra_drivers) == ("", ())
