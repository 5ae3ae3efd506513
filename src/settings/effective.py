"""The effective configuration: what a process runs with, assembled by pydantic-settings.

`EffectiveConfig` is the settings class. Its sources, highest first, are the
values given explicitly (the command line over the environment, parsed by
the flag library into the class's own arguments) and the config file; the
field defaults come last. The file's source finds the path in the result
of the source above it (``config_path``), so one class serves every load,
at start-up and on each reload, with no state kept between them.

Everything is validated once, together: the flags (`settings.flags`), the
file's sections (`settings.sections`, `settings.sharing`), each value
whatever its source. When something is refused, `Rejected` carries what the
sources gave, so the loader can say where each bad value came from.

The config is immutable and carries a digest of its values, so the
reconcile loop can tell "the config changed" from "the same config was read
again" by comparing two strings, and `/state` can show which config a node
runs. The digest covers values only: where each value came from
(``sources``), the warnings and the file path are reported alongside but do
not change it, so the same settings reached another way are the same config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from functools import cache, cached_property
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from settings.file_reader import read_config_file
from settings.flags import SETTINGS_SPECS, Flags
from settings.sections import GfdSettings, HealthSection, ResourceRules, not_supported
from settings.sharing import Sharing, SharingFile

__all__ = ["ConfigFileSource", "EffectiveConfig", "Origin", "Rejected"]

Origin = Literal["default", "file", "env", "flag"]


class Rejected(Exception):
    """The values were refused; ``data`` is what the sources gave, to locate each problem."""

    def __init__(self, error: ValidationError, data: Any) -> None:
        super().__init__(str(error))
        self.error = error
        self.data = data if isinstance(data, dict) else {}


class ConfigFileSource(PydanticBaseSettingsSource):
    """The v1 config file at ``config_path``, as given by the source above."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Required by the base class; the whole file is read at once in __call__.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = self.current_state.get("config_path")
        return read_config_file(path) if path else {}


def _read_only(origins: Mapping[str, Origin]) -> Mapping[str, Origin]:
    return MappingProxyType(dict(origins))


class EffectiveConfig(BaseSettings):
    """Flags plus the file's sections, with where each flag's value came from.

    Equality and hashing go by the values (and so agree with the digest).
    Fields are in the file's order, which is the order problems are listed in.
    """

    model_config = SettingsConfigDict(frozen=True, extra="forbid")

    config_path: Annotated[str | None, AfterValidator(lambda path: path or None)] = None
    flags: Flags = Flags()
    gfd: GfdSettings = GfdSettings()
    resources: ResourceRules = ResourceRules()
    sharing_file: SharingFile = Field(default=SharingFile(), alias="sharing")
    health: HealthSection = HealthSection()
    sources: Annotated[Mapping[str, Origin], AfterValidator(_read_only)] = Field(
        default_factory=dict
    )
    read_warnings: tuple[str, ...] = ()
    # Keys of the file that mean nothing here (``flags.migStrategi``), for /state.
    unknown_keys: tuple[str, ...] = ()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The built-in environment source is left out: it would read any
        # variable that happens to match a field name with its own parsing
        # rules; the flag library reads the environment as the reference does.
        return (init_settings, ConfigFileSource(settings_cls))

    @model_validator(mode="before")
    @classmethod
    def _every_setting_has_an_origin(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        given = data.get("sources") or {}
        origins = {spec.field: given.get(spec.field, "default") for spec in SETTINGS_SPECS}
        flags = data.get("flags")
        if not isinstance(flags, dict) or not flags.get("dev_root"):
            # An empty device root means "the driver root", so it comes from there.
            origins["dev_root"] = origins["driver_root"]
        return {**data, "sources": origins}

    @model_validator(mode="wrap")
    @classmethod
    def _keep_what_was_refused(
        cls, data: Any, handler: ModelWrapValidatorHandler[EffectiveConfig]
    ) -> EffectiveConfig:
        try:
            return handler(data)
        except ValidationError as error:
            raise Rejected(error, data) from None

    @cached_property
    def _resolved(self) -> tuple[Sharing, tuple[str, ...]]:
        warnings: list[str] = []
        sharing = self.sharing_file.resolve(self.config_path or "", warnings)
        if self.resources.gpus or self.resources.mig:
            what = "Customizing the 'resources' field"
            warnings.append(not_supported(self.config_path or "", "resources", what))
        return sharing, tuple(warnings)

    @property
    def sharing(self) -> Sharing:
        """The sharing the plugin applies (see `settings.sharing.SharingSection.resolve`)."""
        return self._resolved[0]

    @property
    def warnings(self) -> tuple[str, ...]:
        """Problems worth fixing that did not stop the load, one line each."""
        return self.read_warnings + self._resolved[1]

    def values(self) -> dict[str, object]:
        """The values, JSON-able: what the digest covers."""
        return {
            "health": self.health.model_dump(mode="json", by_alias=True),
            "flags": self.flags.model_dump(mode="json"),
            "sharing": json.loads(json.dumps(dataclasses.asdict(self.sharing))),
            "resources": self.resources.model_dump(mode="json"),
            "imex": {
                "channel_ids": list(self.flags.imex_channel_ids),
                "required": self.flags.imex_required,
            },
            "gfd": self.gfd.model_dump(mode="json"),
        }

    @cached_property
    def _digest(self) -> str:
        canonical = json.dumps(self.values(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("ascii")).hexdigest()

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of `values`."""
        return self._digest

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EffectiveConfig) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def to_json(self) -> dict[str, object]:
        """Canonical JSON-able dump: digest, values, the file read, origins, warnings."""
        return {
            "digest": self.digest,
            "config_path": self.config_path,
            **self.values(),
            "sources": dict(self.sources),
            "warnings": list(self.warnings),
            "unknown_keys": list(self.unknown_keys),
        }

    def summary(self) -> dict[str, object]:
        """What a log line needs: the digest, the file, and only the values not at default.

        The whole config is on ``/state``; a log record that repeats every
        default on each change is kilobytes of noise.
        """
        return {
            "digest": self.digest,
            "config_path": self.config_path,
            "non_default": _difference(self.values(), _default_values()),
        }


@cache
def _default_values() -> dict[str, object]:
    return EffectiveConfig().values()


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
