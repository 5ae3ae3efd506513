"""The effective configuration: what the plugin actually runs with.

`EffectiveConfig` is immutable and carries a digest of its values, so the
reconcile loop can tell "the config changed" from "the same config was read
again" by comparing two strings, and `/state` can show which config a node
runs. The digest covers values only: where each value came from
(``sources``), the warnings, and the file path are reported alongside but do
not change it, so the same settings reached another way are the same config.

Sharing is resolved here to what the plugin does with it, matching the
reference: ``rename`` and ``devices`` are validated but not applied (with a
warning), ``renameByDefault`` advertises ``<name>.shared``, and MPS defaults
``failRequestsGreaterThanOne`` to true.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from settings.choices import SharingStrategy
from settings.errors import ConfigError
from settings.flag_table import FLAGS
from settings.flags import Flags
from settings.sources import Origin

if TYPE_CHECKING:
    from settings.file_reader import ConfigDocument
    from settings.file_schema import ReplicatedResourcesFile

__all__ = [
    "EffectiveConfig",
    "GfdSettings",
    "Imex",
    "ResourcePattern",
    "ResourceRules",
    "SharedResource",
    "Sharing",
    "flags_to_json",
]


@dataclass(frozen=True)
class SharedResource:
    """A resource whose devices are each advertised ``replicas`` times."""

    name: str
    replicas: int
    rename: str | None = None

    @property
    def advertised_name(self) -> str:
        """The name the replicas are advertised under."""
        return self.rename or self.name


@dataclass(frozen=True)
class Sharing:
    """The active sharing strategy and its resources (none when not configured)."""

    strategy: SharingStrategy = SharingStrategy.NONE
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()


@dataclass(frozen=True)
class ResourcePattern:
    pattern: str
    name: str


@dataclass(frozen=True)
class ResourceRules:
    """``resources.gpus`` / ``resources.mig`` as written in the file."""

    gpus: tuple[ResourcePattern, ...] = ()
    mig: tuple[ResourcePattern, ...] = ()


@dataclass(frozen=True)
class Imex:
    channel_ids: tuple[int, ...] = ()
    required: bool = False


@dataclass(frozen=True)
class GfdSettings:
    """``flags.gfd`` and ``flags.useNodeFeatureAPI`` for the node labeller.

    None means "not in the file", so the labeller can apply its own flags and
    defaults. ``sleep_interval`` is in seconds; ``math.inf`` means infinite.
    """

    oneshot: bool | None = None
    no_timestamp: bool | None = None
    sleep_interval: float | None = None
    output_file: str | None = None
    machine_type_file: str | None = None
    use_node_feature_api: bool | None = None


def _plain(value: Any) -> Any:
    """JSON-able form: enums as their value, tuples as lists, inf as 'infinite'."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and math.isinf(value):
        return "infinite"
    return value


def flags_to_json(flags: Flags) -> dict[str, object]:
    return {spec.field: _plain(getattr(flags, spec.field)) for spec in FLAGS}


def _values_json(
    flags: Flags,
    sharing: Sharing,
    resources: ResourceRules,
    imex: Imex,
    gfd: GfdSettings,
    health: Mapping[str, object],
) -> dict[str, object]:
    return {
        "health": dict(health),
        "flags": flags_to_json(flags),
        "sharing": {
            "strategy": sharing.strategy.value,
            "rename_by_default": sharing.rename_by_default,
            "fail_requests_greater_than_one": sharing.fail_requests_greater_than_one,
            "resources": [
                {"name": r.name, "replicas": r.replicas, "rename": r.rename}
                for r in sharing.resources
            ],
        },
        "resources": {
            "gpus": [{"pattern": r.pattern, "name": r.name} for r in resources.gpus],
            "mig": [{"pattern": r.pattern, "name": r.name} for r in resources.mig],
        },
        "imex": {"channel_ids": list(imex.channel_ids), "required": imex.required},
        "gfd": {
            "oneshot": gfd.oneshot,
            "no_timestamp": gfd.no_timestamp,
            "sleep_interval": _plain(gfd.sleep_interval),
            "output_file": gfd.output_file,
            "machine_type_file": gfd.machine_type_file,
            "use_node_feature_api": gfd.use_node_feature_api,
        },
    }


def _digest(values: Mapping[str, object]) -> str:
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class EffectiveConfig:
    """Flags plus the file's sections, resolved, with a digest of the values.

    Equality and hashing go by the values (and so agree with the digest).
    """

    flags: Flags
    sharing: Sharing = Sharing()
    resources: ResourceRules = ResourceRules()
    imex: Imex = Imex()
    gfd: GfdSettings = GfdSettings()
    # The file's `health` section as written (the plugin's health policy reads it).
    health: Mapping[str, object] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )
    sources: Mapping[str, Origin] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, hash=False
    )
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # Keys of the file that mean nothing here (``flags.migStrategi``), for /state.
    unknown_keys: tuple[str, ...] = field(default=(), compare=False)
    config_path: str | None = field(default=None, compare=False)
    digest: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # Always derived, never trusted from the caller.
        values = _values_json(
            self.flags, self.sharing, self.resources, self.imex, self.gfd, self.health
        )
        object.__setattr__(self, "digest", _digest(values))
        object.__setattr__(self, "health", MappingProxyType(dict(self.health)))
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def to_json(self) -> dict[str, object]:
        """Canonical JSON-able dump: digest, values, the file read, origins, warnings."""
        return {
            "digest": self.digest,
            "config_path": self.config_path,
            **_values_json(
                self.flags, self.sharing, self.resources, self.imex, self.gfd, self.health
            ),
            "sources": dict(self.sources),
            "warnings": list(self.warnings),
            "unknown_keys": list(self.unknown_keys),
        }

    def summary(self) -> dict[str, object]:
        """What a log line needs: the digest, the file, and only the values not at default.

        The whole config is on ``/state``; a log record that repeats every
        default on each change is kilobytes of noise.
        """
        values = _values_json(
            self.flags, self.sharing, self.resources, self.imex, self.gfd, self.health
        )
        return {
            "digest": self.digest,
            "config_path": self.config_path,
            "non_default": _difference(values, _default_values()),
        }


@cache
def _default_values() -> dict[str, object]:
    # Field defaults only: a validated `Flags()` would read the environment.
    flags = Flags.model_construct()
    flags = flags.model_copy(update={"dev_root": flags.driver_root})
    return _values_json(flags, Sharing(), ResourceRules(), Imex(), GfdSettings(), {})


def _difference(values: Mapping[str, object], defaults: Mapping[str, object]) -> dict[str, object]:
    """The leaves of ``values`` that differ from ``defaults`` (nested mappings kept nested)."""
    changed: dict[str, object] = {}
    for key, value in values.items():
        default = defaults.get(key)
        if isinstance(value, Mapping) and isinstance(default, Mapping):
            inner = _difference(value, default)
            if inner:
                changed[key] = inner
        elif value != default:
            changed[key] = value
    return changed


def _not_supported(document: ConfigDocument, path: str, what: str) -> str:
    # The reference's warning texts, located.
    return str(
        ConfigError(
            f"{what} is not yet supported in the config. Ignoring...",
            origin=document.path,
            path=path,
        )
    )


def _resolve_section(
    document: ConfigDocument,
    key: str,
    section: ReplicatedResourcesFile,
    strategy: SharingStrategy,
    warnings: list[str],
) -> Sharing:
    rename_by_default = bool(section.rename_by_default)
    fail_default = strategy is SharingStrategy.MPS
    resources: list[SharedResource] = []
    for index, entry in enumerate(section.resources):
        where = f"sharing.{key}.resources[{index}]"
        shared_name = f"{entry.name}.shared"
        if entry.rename is not None and (not rename_by_default or entry.rename != shared_name):
            warnings.append(
                _not_supported(
                    document,
                    f"{where}.rename",
                    f"Setting the 'rename' field in sharing.{key}.resources",
                )
            )
        if entry.devices != "all":
            warnings.append(
                _not_supported(
                    document,
                    f"{where}.devices",
                    f"Customizing the 'devices' field in sharing.{key}.resources",
                )
            )
        resources.append(
            SharedResource(
                name=entry.name,
                replicas=entry.replicas,
                rename=shared_name if rename_by_default else None,
            )
        )
    fail = section.fail_requests_greater_than_one
    return Sharing(
        strategy=strategy,
        rename_by_default=rename_by_default,
        fail_requests_greater_than_one=fail_default if fail is None else fail,
        resources=tuple(resources),
    )


def resolve_file_sections(
    document: ConfigDocument | None,
) -> tuple[Sharing, ResourceRules, GfdSettings, list[str]]:
    """The non-flag sections of the file, resolved, plus the warnings they raise."""
    if document is None:
        return Sharing(), ResourceRules(), GfdSettings(), []
    warnings = list(document.warnings)
    model = document.model
    sharing = Sharing()
    if model.sharing is not None and model.sharing.mps is not None:
        sharing = _resolve_section(
            document, "mps", model.sharing.mps, SharingStrategy.MPS, warnings
        )
    elif model.sharing is not None and model.sharing.time_slicing is not None:
        sharing = _resolve_section(
            document,
            "timeSlicing",
            model.sharing.time_slicing,
            SharingStrategy.TIME_SLICING,
            warnings,
        )
    rules = ResourceRules()
    if model.resources is not None:
        rules = ResourceRules(
            gpus=tuple(ResourcePattern(r.pattern, r.name) for r in model.resources.gpus or ()),
            mig=tuple(ResourcePattern(r.pattern, r.name) for r in model.resources.mig or ()),
        )
        if rules.gpus or rules.mig:
            warnings.append(
                _not_supported(document, "resources", "Customizing the 'resources' field")
            )
    gfd = GfdSettings()
    if model.flags is not None:
        section = model.flags.gfd
        gfd = GfdSettings(
            oneshot=section.oneshot if section else None,
            no_timestamp=section.no_timestamp if section else None,
            sleep_interval=section.sleep_interval if section else None,
            output_file=section.output_file if section else None,
            machine_type_file=section.machine_type_file if section else None,
            use_node_feature_api=model.flags.use_node_feature_api,
        )
    return sharing, rules, gfd, warnings
