"""Everything the resource logic needs to know about the effective configuration.

The settings package owns parsing and precedence (CLI > env > file > defaults);
this module only states, as one plain frozen value, the subset that decides
which resources exist and how an allocation is answered. Keeping it free of
pydantic lets the resource logic be tested with literal values, and the
defaults here are the reference plugin's defaults so `ResourceOptions()` is a
stock installation.

Host probes (`host_dev_exists`, `is_char_device`, `is_dir`, `glob`) are
injected so tests can describe a node's `/dev` without touching the real one;
they take part in neither equality nor hashing.
"""

from __future__ import annotations

import glob as _glob
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from resources.errors import ResourceError
from settings.choices import (
    AllocationPolicy,
    DeviceIdStrategy,
    DeviceListStrategy,
    MigStrategy,
    SharingStrategy,
)
from settings.sharing import DevicesSpec, Sharing

# The same closed sets the settings parse; defined once, in settings.choices.
__all__ = [
    "CDI_STRATEGIES",
    "AllocationPolicy",
    "DeviceIdStrategy",
    "DeviceListStrategy",
    "MigStrategy",
    "ResourceOptions",
    "ShareRule",
    "SharingOptions",
    "SharingStrategy",
    "sharing_options",
]


CDI_STRATEGIES = frozenset({DeviceListStrategy.CDI_ANNOTATIONS, DeviceListStrategy.CDI_CRI})


def _is_char_device(path: str) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _glob_paths(pattern: str) -> Sequence[str]:
    return sorted(_glob.glob(pattern))


@dataclass(frozen=True, kw_only=True)
class ShareRule:
    """One sharing entry: which devices of a resource it replicates, and how often.

    Attributes:
        name: full resource name (`nvidia.com/gpu`, `nvidia.com/mig-1g.5gb`).
        replicas: replicas of each selected device (>= 2).
        devices: `"all"`, a count (the first N devices in index order) or a
            tuple of references (GPU or MIG indices, GPU or MIG UUIDs).
        distinct_devices: a request may hold at most one replica per device;
            `None` when the entry does not say.
        where: the entry's path in the config file, for messages.
    """

    name: str
    replicas: int
    devices: DevicesSpec = "all"
    distinct_devices: bool | None = None
    where: str = ""

    @property
    def label(self) -> str:
        """How messages name the entry: its path, else its resource."""
        return self.where or f"sharing entry for {self.name}"


@dataclass(frozen=True, kw_only=True)
class SharingOptions:
    """The active replicated-resource configuration.

    Attributes:
        strategy: `none`, `time-slicing` or `mps`; the settings package derives
            it (MPS when `sharing.mps` is present with a replicated entry).
        rules: the entries, in file order; several may name one resource over
            disjoint devices (replica counts per GPU). Names with no devices
            on the node are ignored, as in the reference.
        replicas: shorthand for rules replicating every device of a resource:
            full resource name -> number of replicas (>= 2).
        rename_by_default: advertise replicas as `<name>.shared`.
        fail_requests_greater_than_one: reject a request for more than one
            replica; `None` means "unset", which is true for MPS and false for
            time-slicing.
    """

    strategy: SharingStrategy = SharingStrategy.NONE
    rules: tuple[ShareRule, ...] = ()
    # Compared but not hashed, so options stay hashable with a plain dict here.
    replicas: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool | None = None

    @property
    def fails_multiple_requests(self) -> bool:
        """The effective `failRequestsGreaterThanOne`."""
        if self.fail_requests_greater_than_one is None:
            return self.strategy is SharingStrategy.MPS
        return self.fail_requests_greater_than_one

    @property
    def all_rules(self) -> tuple[ShareRule, ...]:
        """`rules`, then one rule over every device per `replicas` entry."""
        shorthand = (ShareRule(name=name, replicas=n) for name, n in self.replicas.items())
        return (*self.rules, *shorthand)


def sharing_options(sharing: Sharing) -> SharingOptions:
    """The settings' `sharing` section as the resource logic takes it."""
    return SharingOptions(
        strategy=sharing.strategy,
        rules=tuple(
            ShareRule(
                name=resource.name,
                replicas=resource.replicas,
                devices=resource.devices,
                distinct_devices=resource.distinct_devices,
                where=resource.where,
            )
            for resource in sharing.resources
        ),
        rename_by_default=sharing.rename_by_default,
        fail_requests_greater_than_one=sharing.fail_requests_greater_than_one,
    )


@dataclass(frozen=True, kw_only=True)
class ResourceOptions:
    """Effective configuration of the resource logic, with the reference's defaults.

    Attributes:
        mig_strategy: `--mig-strategy` (default `none`).
        sharing: time-slicing / MPS replication (default: no sharing).
        device_list_strategy: `--device-list-strategy`, a set given as a tuple
            (default `envvar`); an empty tuple behaves like "all CDI" (nothing
            but the extras is added).
        device_id_strategy: `--device-id-strategy` (default `uuid`).
        pass_device_specs: `--pass-device-specs` (default false).
        driver_root: host driver root, `--driver-root` (default `/`).
        dev_root: host dev root, `--dev-root`; `None` or `""` falls back to
            `driver_root`.
        driver_root_ctr_path: where the host driver root is mounted in the
            plugin container, `--driver-root-ctr-path` (default `/driver-root`).
        gdrcopy_enabled / gds_enabled / mofed_enabled: the extra-feature flags.
        cdi_annotation_prefix: `--cdi-annotation-prefix` (default `cdi.k8s.io/`).
        nvidia_cdi_hook_path: `--nvidia-cdi-hook-path`, the executable the
            CDI spec's hooks run (a host path).
        cdi_disable_hooks: `--cdi-disable-hooks`, hook names left out of
            the CDI specs (`all` leaves out every hook).
        sysfs_root: where sysfs is mounted (DRM nodes of each GPU for CDI).
        mps_root: host MPS root, `--mps-root`; required when sharing is MPS.
        shared_devices_allocation_policy: `distributed` (default) or `packed`.
        imex_channel_ids: requested IMEX channels (only `()` or `(0,)` valid).
        imex_required: fail when a requested channel is missing.
        host_dev_exists: probe, inside the plugin container, for an optional
            control node such as `/dev/nvidia-uvm` (default `os.path.exists`).
        is_char_device: probe used for IMEX channel discovery.
        is_dir: probe deciding whether the container driver root carries `/dev`.
        glob: lists device nodes matching a pattern (gdrcopy/GDS/MOFED CDI specs).
    """

    mig_strategy: MigStrategy = MigStrategy.NONE
    sharing: SharingOptions = field(default_factory=SharingOptions)
    device_list_strategy: tuple[DeviceListStrategy, ...] = (DeviceListStrategy.ENVVAR,)
    device_id_strategy: DeviceIdStrategy = DeviceIdStrategy.UUID
    pass_device_specs: bool = False
    driver_root: str = "/"
    dev_root: str | None = None
    driver_root_ctr_path: str = "/driver-root"
    gdrcopy_enabled: bool = False
    gds_enabled: bool = False
    mofed_enabled: bool = False
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    nvidia_cdi_hook_path: str = "/usr/bin/nvidia-ctk"
    cdi_disable_hooks: tuple[str, ...] = ()
    sysfs_root: str = "/sys"
    mps_root: str | None = None
    shared_devices_allocation_policy: AllocationPolicy = AllocationPolicy.DISTRIBUTED
    imex_channel_ids: tuple[int, ...] = ()
    imex_required: bool = False
    host_dev_exists: Callable[[str], bool] = field(
        default=os.path.exists, compare=False, hash=False, repr=False
    )
    is_char_device: Callable[[str], bool] = field(
        default=_is_char_device, compare=False, hash=False, repr=False
    )
    is_dir: Callable[[str], bool] = field(
        default=os.path.isdir, compare=False, hash=False, repr=False
    )
    glob: Callable[[str], Sequence[str]] = field(
        default=_glob_paths, compare=False, hash=False, repr=False
    )

    @property
    def strategies(self) -> frozenset[DeviceListStrategy]:
        return frozenset(self.device_list_strategy)

    @property
    def cdi_enabled(self) -> bool:
        return bool(self.strategies & CDI_STRATEGIES)

    @property
    def all_cdi(self) -> bool:
        """True when nothing but CDI is requested (also for an empty strategy list)."""
        return self.strategies <= CDI_STRATEGIES

    @property
    def host_dev_root(self) -> str:
        """Host root of `/dev` for DeviceSpecs: `--dev-root`, else `--driver-root`."""
        return self.dev_root or self.driver_root

    @property
    def container_dev_root(self) -> str:
        """Root of `/dev` as seen from the plugin container.

        The driver root mount when it carries a `dev` directory (driver
        container installs), otherwise the container's own `/`.
        """
        root = self.driver_root_ctr_path
        if root and self.is_dir(join_root(root, "/dev")):
            return root
        return "/"

    def validate(self) -> None:
        """Reject combinations the reference refuses at start-up.

        Raises:
            ResourceError: with the reference's message.
        """
        for strategy in self.device_list_strategy:
            if strategy not in DeviceListStrategy.__members__.values():
                raise ResourceError(
                    f"invalid --device-list-strategy option: invalid strategy: {strategy}"
                )
        if self.imex_channel_ids not in ((), (0,)):
            found = " ".join(str(i) for i in self.imex_channel_ids)
            raise ResourceError(
                "invalid IMEX channel IDs: invalid IMEX config: "
                f"channelIDs must be [] or [0]; found [{found}]"
            )
        for rule in self.sharing.all_rules:
            if rule.replicas < 2:
                raise ResourceError(f"number of replicas must be >= 2 (resource {rule.name})")
        if self.sharing.strategy is SharingStrategy.NONE and self.sharing.all_rules:
            raise ResourceError("replicas are configured but the sharing strategy is none")
        if self.sharing.strategy is SharingStrategy.MPS:
            if self.mig_strategy is MigStrategy.MIXED:
                raise ResourceError("using --mig-strategy=mixed is not supported with MPS")
            if not self.mps_root:
                raise ResourceError("using MPS requires --mps-root to be specified")


def join_root(root: str, path: str) -> str:
    """`root` + absolute `path`, like Go's filepath.Join (so `/` + `/dev/x` is `/dev/x`)."""
    joined = root.rstrip("/") + "/" + path.lstrip("/")
    normalised = os.path.normpath(joined)
    return normalised if not normalised.startswith("//") else "/" + normalised.lstrip("/")
