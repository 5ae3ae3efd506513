"""IMEX channel discovery through the injected device probes."""

from __future__ import annotations

import pytest

from resources.builder import plan_resources
from resources.errors import ResourceError
from resources.imex import discover_imex_channels
from resources.options import MigStrategy

from .nodes import FakeHost, inventory, make_gpu, plain_node

CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"


@pytest.mark.parametrize(
    ("host", "options", "channels"),
    [
        pytest.param(FakeHost(char_devices={CHANNEL}), {}, ("0",), id="plain-path"),
        pytest.param(
            FakeHost(dirs={"/driver-root/dev"}, char_devices={"/driver-root" + CHANNEL}),
            {},
            ("0",),
            id="under-the-driver-root",
        ),
        pytest.param(
            FakeHost(dirs={"/driver-root/dev"}, char_devices={CHANNEL}),
            {},
            ("0",),
            id="driver-root-then-plain-path",
        ),
        pytest.param(
            FakeHost(char_devices={"/driver-root" + CHANNEL}),
            {},
            (),
            id="driver-root-without-dev-is-not-searched",
        ),
        pytest.param(FakeHost(files={CHANNEL}), {}, (), id="not-a-char-device"),
        pytest.param(
            FakeHost(char_devices={CHANNEL}), {"imex_channel_ids": ()}, (), id="none-asked"
        ),
    ],
)
def test_discovery(host: FakeHost, options: dict[str, object], channels: tuple[str, ...]) -> None:
    settings = host.options(**{"imex_channel_ids": (0,), **options})
    assert discover_imex_channels(settings).channels == channels


def test_a_missing_optional_channel_is_a_warning() -> None:
    plan = plan_resources(plain_node(1), FakeHost().options(imex_channel_ids=(0,)))
    assert plan.imex_channels == ()
    assert plan.warnings == ("requested IMEX channel channel0 does not exist; not injecting it",)
    assert plan.resources[0].behaviour.imex_channels == ()


def test_a_missing_required_channel_is_an_error() -> None:
    options = FakeHost(files={CHANNEL}).options(imex_channel_ids=(0,), imex_required=True)
    with pytest.raises(ResourceError) as error:
        plan_resources(plain_node(1), options)
    assert str(error.value) == (
        "error querying IMEX channels: requested IMEX channel channel0 does not exist"
    )


def test_found_channels_reach_every_resource() -> None:
    node = inventory([make_gpu(0, migs=[(0, "1g.5gb", 4864)]), make_gpu(1)])
    options = FakeHost(char_devices={CHANNEL}).options(
        imex_channel_ids=(0,), imex_required=True, mig_strategy=MigStrategy.MIXED
    )
    plan = plan_resources(node, options)
    assert plan.imex_channels == ("0",)
    assert [r.behaviour.imex_channels for r in plan.resources] == [("0",), ("0",)]
