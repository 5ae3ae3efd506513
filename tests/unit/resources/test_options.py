"""ResourceOptions: the reference's defaults, derived values, root joining."""

from __future__ import annotations

import pytest

from resources.options import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    ResourceOptions,
    SharingOptions,
    SharingStrategy,
    join_root,
)

from .nodes import FakeHost


def test_defaults_are_the_reference_defaults() -> None:
    options = ResourceOptions()
    assert options.mig_strategy is MigStrategy.NONE
    assert options.sharing == SharingOptions()
    assert options.sharing.strategy is SharingStrategy.NONE
    assert not options.sharing.fails_multiple_requests
    assert options.device_list_strategy == (DeviceListStrategy.ENVVAR,)
    assert options.device_id_strategy is DeviceIdStrategy.UUID
    assert options.pass_device_specs is False
    assert (options.driver_root, options.dev_root, options.host_dev_root) == ("/", None, "/")
    assert options.driver_root_ctr_path == "/driver-root"
    assert (options.gdrcopy_enabled, options.gds_enabled, options.mofed_enabled) == (
        False,
        False,
        False,
    )
    assert options.cdi_annotation_prefix == "cdi.k8s.io/"
    assert options.nvidia_cdi_hook_path == "/usr/bin/nvidia-ctk"
    assert options.mps_root is None
    assert options.shared_devices_allocation_policy is AllocationPolicy.DISTRIBUTED
    assert (options.imex_channel_ids, options.imex_required) == ((), False)
    assert not options.cdi_enabled
    assert not options.all_cdi


def test_options_are_hashable_and_compare_by_value() -> None:
    def sharing(replicas: int) -> SharingOptions:
        return SharingOptions(
            strategy=SharingStrategy.TIME_SLICING, replicas={"nvidia.com/gpu": replicas}
        )

    first = ResourceOptions(sharing=sharing(2))
    assert first == ResourceOptions(sharing=sharing(2))
    assert first != ResourceOptions(sharing=sharing(3))
    assert hash(first) == hash(ResourceOptions(sharing=sharing(2)))
    # Probes never take part in comparison.
    assert FakeHost().options() == ResourceOptions()


@pytest.mark.parametrize(
    ("strategies", "cdi", "all_cdi"),
    [
        pytest.param((), False, True, id="empty"),
        pytest.param((DeviceListStrategy.CDI_CRI,), True, True, id="cdi-only"),
        pytest.param(
            (DeviceListStrategy.CDI_CRI, DeviceListStrategy.ENVVAR), True, False, id="mixed"
        ),
    ],
)
def test_cdi_flags(strategies: tuple[DeviceListStrategy, ...], cdi: bool, all_cdi: bool) -> None:
    options = ResourceOptions(device_list_strategy=strategies)
    assert (options.cdi_enabled, options.all_cdi) == (cdi, all_cdi)


def test_container_dev_root_is_the_driver_root_only_when_it_holds_dev() -> None:
    assert FakeHost(dirs={"/driver-root/dev"}).options().container_dev_root == "/driver-root"
    assert FakeHost().options().container_dev_root == "/"


@pytest.mark.parametrize(
    ("root", "path", "joined"),
    [
        ("/", "/dev/nvidia0", "/dev/nvidia0"),
        ("/run/nvidia/driver", "/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0"),
        ("/run/nvidia/driver/", "/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0"),
        ("", "/dev/nvidia0", "/dev/nvidia0"),
        ("/mps", "nvidia.com/gpu/pipe", "/mps/nvidia.com/gpu/pipe"),
    ],
)
def test_join_root(root: str, path: str, joined: str) -> None:
    assert join_root(root, path) == joined
