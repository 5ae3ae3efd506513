"""The help text and the documentation list every flag as the parser knows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import Flags, HelpRequested, cli_help, flags_markdown_table, load_config, wants_help
from settings.flag_spec import show_default
from settings.flags import FLAGS, FLAGS_BY_FIELD

DOCS = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"

# The reference plugin's flags, aliases and variables (config.md section 1.2).
REFERENCE = {
    "mig_strategy": (("mig-strategy",), ("MIG_STRATEGY",)),
    "fail_on_init_error": (("fail-on-init-error",), ("FAIL_ON_INIT_ERROR",)),
    "driver_root": (("driver-root", "nvidia-driver-root"), ("NVIDIA_DRIVER_ROOT",)),
    "dev_root": (("dev-root", "nvidia-dev-root"), ("NVIDIA_DEV_ROOT",)),
    "pass_device_specs": (("pass-device-specs",), ("PASS_DEVICE_SPECS",)),
    "device_list_strategy": (("device-list-strategy",), ("DEVICE_LIST_STRATEGY",)),
    "device_id_strategy": (("device-id-strategy",), ("DEVICE_ID_STRATEGY",)),
    "gdrcopy_enabled": (("gdrcopy-enabled",), ("GDRCOPY_ENABLED",)),
    "gds_enabled": (("gds-enabled",), ("GDS_ENABLED",)),
    "mofed_enabled": (("mofed-enabled",), ("MOFED_ENABLED",)),
    "cdi_annotation_prefix": (("cdi-annotation-prefix",), ("CDI_ANNOTATION_PREFIX",)),
    "nvidia_cdi_hook_path": (
        ("nvidia-cdi-hook-path", "nvidia-ctk-path"),
        ("NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"),
    ),
    "driver_root_ctr_path": (
        ("driver-root-ctr-path", "container-driver-root"),
        ("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"),
    ),
    "mps_root": (("mps-root",), ("MPS_ROOT",)),
    "shared_devices_allocation_policy": (
        ("shared-devices-allocation-policy",),
        ("SHARED_DEVICES_ALLOCATION_POLICY",),
    ),
    "device_discovery_strategy": (("device-discovery-strategy",), ("DEVICE_DISCOVERY_STRATEGY",)),
    "imex_channel_ids": (("imex-channel-ids",), ("IMEX_CHANNEL_IDS",)),
    "imex_required": (("imex-required",), ("IMEX_REQUIRED",)),
    "kubelet_socket": (("kubelet-socket",), ("KUBELET_SOCKET",)),
    "config_file": (("config-file",), ("CONFIG_FILE",)),
    "cdi_feature_flags": (("cdi-feature-flags",), ("CDI_FEATURE_FLAGS",)),
    "cdi_disable_hooks": (("cdi-disable-hooks",), ("CDI_DISABLE_HOOKS",)),
    # Environment only: read by the reference's health checker (config.md, health.md).
    "disable_healthchecks": ((), ("DP_DISABLE_HEALTHCHECKS",)),
    "enable_healthchecks": ((), ("DP_ENABLE_HEALTHCHECKS",)),
}


def test_reference_flags_are_all_there() -> None:
    ours = {spec.field: (spec.names, spec.env) for spec in FLAGS if spec.reference}
    assert ours == REFERENCE


def test_every_field_of_flags_is_a_flag_and_the_health_section_adds_three() -> None:
    sections = {(section, key) for section, key in (spec.path for spec in FLAGS)}
    assert sections == {("flags", name) for name in Flags.model_fields} | {
        ("health", "quietPeriod"),
        ("health", "disableHealthchecks"),
        ("health", "enableHealthchecks"),
    }


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("mig_strategy", '"none"'),
        ("fail_on_init_error", "true"),
        ("driver_root", '"/"'),
        ("device_list_strategy", '"envvar"'),
        ("kubelet_socket", '"/var/lib/kubelet/device-plugins/kubelet.sock"'),
        ("imex_channel_ids", "(none)"),
        ("state_address", '"127.0.0.1:9040"'),
        ("log_format", '"text"'),
        ("node_label", '"nvidia.com/device-plugin.config"'),
        ("fallback_strategies", '"named,single"'),
        ("cdi_spec_dir", '"/var/run/cdi"'),
        ("health_quiet_period", "60"),
    ],
)
def test_documented_defaults(field: str, text: str) -> None:
    assert show_default(FLAGS_BY_FIELD[field]) == text


def test_help_lists_every_flag_variable_and_default() -> None:
    text = cli_help()
    for spec in FLAGS:
        for name in spec.names:
            assert f"--{name}" in text
        for variable in spec.env:
            assert f"${variable}" in text
        assert f"default: {show_default(spec)}" in text
        if spec.file_key:
            assert f"file: {spec.file_key}" in text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--help"], True),
        (["-h"], True),
        (["--mig-strategy=mixed", "-help"], True),
        (["--", "--help"], False),
        (["--mig-strategy=mixed"], False),
    ],
)
def test_wants_help(argv: list[str], expected: bool) -> None:
    assert wants_help(argv) is expected


def test_loader_raises_help_requested() -> None:
    with pytest.raises(HelpRequested) as caught:
        load_config(["--mig-strategy=bogus", "--help"], {})
    assert caught.value.text == cli_help()


def test_documentation_embeds_the_flags_table() -> None:
    assert flags_markdown_table() in DOCS.read_text(encoding="utf-8")
