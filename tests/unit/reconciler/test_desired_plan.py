"""One serving plan per kubelet API: what a DRA node's desired state holds, and what it says.

Built from the simulated `dgx-a100` node and real configs: a DRA node has a
`DraPlan` and nothing of the device-plugin API (no allocator, no node-wide
CDI spec, no MPS gate), whatever the config's sharing or device-list
strategy; node-wide sharing is named in the plan's warnings, pointing to the
claim's `GpuConfig`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devices.simulated import SimulatedLibrary
from kubelet.dra.checkpoint import MigRecord, PreparedClaim, checkpoint_path, save
from kubelet.dra.types import ClaimRef
from reconciler.plan.desired import Desired, DevicePluginPlan, DraPlan, build_desired
from settings import load_config

NODE = "gpu-node-1"


def desired(tmp_path: Path, *args: str, sharing: str = "") -> Desired:
    library = SimulatedLibrary.from_argument("dgx-a100")
    library.init()
    extra: list[str] = []
    if sharing:
        path = tmp_path / "config.yaml"
        path.write_text(sharing)
        extra = ["--config-file", str(path)]
    config = load_config(
        [
            "--node-name",
            NODE,
            "--cdi-spec-dir",
            str(tmp_path / "cdi"),
            "--mps-root",
            str(tmp_path / "mps"),
            *args,
            *extra,
        ],
        {},
    )
    return build_desired(config, library.inventory())


MPS = """
version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""
TIME_SLICING = MPS.replace("mps:", "timeSlicing:")


@pytest.mark.parametrize("sharing", ["", MPS, TIME_SLICING], ids=["plain", "mps", "timeslicing"])
def test_a_dra_node_has_a_dra_plan_and_nothing_of_the_device_plugin(
    tmp_path: Path, sharing: str
) -> None:
    built = desired(
        tmp_path, "--kubelet-api", "dra", "--device-list-strategy", "cdi-cri", sharing=sharing
    )
    assert isinstance(built.plan, DraPlan)
    assert built.dra is built.plan
    assert (built.allocators, dict(built.resources), built.cdi) == ((), {}, ())
    assert not built.needs_mps
    assert [device.name for device in built.plan.devices] == [f"gpu-{i}" for i in range(8)]
    assert (built.plan.driver, built.plan.node) == ("gpu.nvidia.com", NODE)
    assert built.options.sharing.strategy.value == "none"  # claims' specs carry no node sharing


@pytest.mark.parametrize(
    ("sharing", "key"), [(MPS, "sharing.mps"), (TIME_SLICING, "sharing.timeSlicing")]
)
def test_node_wide_sharing_on_a_dra_node_is_said_not_ignored(
    tmp_path: Path, sharing: str, key: str
) -> None:
    built = desired(tmp_path, "--kubelet-api", "dra", sharing=sharing)
    (warning,) = [w for w in built.warnings if w.startswith(key)]
    assert warning == (
        f"{key} is ignored on a node served through DRA (--kubelet-api dra): GPUs are shared "
        "per claim, through the claim's opaque GpuConfig (sharing.strategy TimeSlicing or MPS, "
        "driver gpu.nvidia.com)"
    )


def test_a_device_plugin_node_has_its_plan_and_no_warning_about_sharing(tmp_path: Path) -> None:
    built = desired(tmp_path, "--device-list-strategy", "cdi-cri", sharing=MPS)
    assert isinstance(built.plan, DevicePluginPlan)
    assert built.dra is None
    assert built.resource_names == ["nvidia.com/gpu"]
    assert built.needs_mps
    assert built.cdi  # the node-wide spec
    assert not [w for w in built.warnings if "DRA" in w]


def test_the_two_plans_of_one_node_have_different_digests(tmp_path: Path) -> None:
    assert desired(tmp_path).digest != desired(tmp_path, "--kubelet-api", "dra").digest


def test_claims_wait_for_device_nodes_except_on_a_simulated_node_without_a_dev_of_its_own(
    tmp_path: Path,
) -> None:
    def checks(*args: str) -> bool:
        plan = desired(tmp_path, "--kubelet-api", "dra", *args).dra
        assert plan is not None
        return plan.check_device_nodes

    assert checks()  # a real node
    assert not checks("--mock-nvml", "dgx-a100")  # the host's /dev has no simulated GPU
    (tmp_path / "root" / "dev").mkdir(parents=True)
    assert checks("--mock-nvml", "dgx-a100", "--driver-root-ctr-path", str(tmp_path / "root"))


def test_a_gpu_whose_only_instances_are_its_claims_stays_partitioned(tmp_path: Path) -> None:
    library = SimulatedLibrary.from_argument("a100-mig-dynamic")
    library.init()
    gpu = library.inventory().gpus[0]
    made = library.create_mig(gpu.uuid, 9, 0)  # a claim's 3g.20gb, or someone else's
    plugins = tmp_path / "plugins"
    args = [
        *("--node-name", NODE, "--kubelet-api", "dra", "--dra-dynamic-mig"),
        *("--kubelet-plugins-directory-path", str(plugins), "--cdi-spec-dir", str(tmp_path)),
    ]

    def names_on_gpu_0() -> set[str]:
        plan = build_desired(load_config(args, {}), library.inventory()).dra
        assert plan is not None
        return {d.name for d in plan.devices if d.parent_uuid == gpu.uuid}

    # Not the plugin's instance: the GPU is served as today (whole, under --mig-strategy none).
    assert names_on_gpu_0() == {"gpu-0"}

    claimed = PreparedClaim(
        ClaimRef("ns", "uid-1", "c"),
        (),
        mig=(MigRecord("gpu-0-mig-3g20gb-9-0", gpu.uuid, 9, 0, gi=made.gi, ci=made.ci),),
    )
    save(checkpoint_path(plugins, "gpu.nvidia.com"), {"uid-1": claimed}, boot_id="b")
    owned = names_on_gpu_0()
    assert {"gpu-0", "gpu-0-mig-1g5gb-19-4", "gpu-0-mig-3g20gb-9-0"} <= owned
    assert len(owned) == 26  # the whole GPU and its 25 placements
