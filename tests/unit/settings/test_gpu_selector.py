"""--include-devices / --exclude-devices: how an entry is read, and every way one is refused.

Entries are GPU indexes, ``GPU-`` UUIDs and PCI bus IDs (NVML's and
``lspci -D``'s spellings), hex in any case, from the command line, the
environment or the file (a list or a comma string). A bad entry is one
line naming where it came from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from settings import ConfigError, load_config
from settings.gpu_refs import GpuRef, RefKind, canonical_bus_id, parse_entry
from settings.gpu_selector import GpuSelector, selector_of

UUID = "GPU-a0bba3c3-c007-582d-8278-aefa736de776"


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("3", RefKind.INDEX, "3"),
        ("03", RefKind.INDEX, "3"),
        (" 7 ", RefKind.INDEX, "7"),
        (UUID, RefKind.UUID, UUID),
        (UUID.upper(), RefKind.UUID, UUID),
        ("gpu-A0BBA3C3-c007-582d-8278-aefa736de776", RefKind.UUID, UUID),
        ("00000000:07:00.0", RefKind.BUS_ID, "0000:07:00.0"),
        ("0000:07:00.0", RefKind.BUS_ID, "0000:07:00.0"),
        ("00000000:3B:00.0", RefKind.BUS_ID, "0000:3b:00.0"),
        ("0000:3b:00.0", RefKind.BUS_ID, "0000:3b:00.0"),
        ("0000:3B:00.1", RefKind.BUS_ID, "0000:3b:00.1"),
        ("10000:01:00.0", RefKind.BUS_ID, "10000:01:00.0"),  # a VMD domain, as lspci prints it
        ("\t0000:87:00.0\n", RefKind.BUS_ID, "0000:87:00.0"),
    ],
)
def test_each_spelling_reads_as_its_canonical_entry(text: str, kind: RefKind, value: str) -> None:
    assert parse_entry(text) == GpuRef(kind, value)


def test_a_whole_number_from_a_yaml_list_is_an_index() -> None:
    assert parse_entry(5) == GpuRef(RefKind.INDEX, "5")


@pytest.mark.parametrize(
    ("item", "problem"),
    [
        ("-1", 'invalid device "-1": a GPU index cannot be negative'),
        (-2, 'invalid device "-2": a GPU index cannot be negative'),
        ("1234567890", 'invalid device "1234567890": GPU index out of range'),
        (
            "foo",
            'invalid device "foo": expected a GPU index, a GPU UUID (GPU-...) or a PCI bus ID '
            "(0000:07:00.0)",
        ),
        (
            "GPU-1234",
            'invalid device "GPU-1234": expected a GPU index, a GPU UUID (GPU-...) or a PCI bus '
            "ID (0000:07:00.0)",
        ),
        (
            "0000:07:00.8",
            'invalid device "0000:07:00.8": expected a GPU index, a GPU UUID (GPU-...) or a PCI '
            "bus ID (0000:07:00.0)",
        ),
        (
            "MIG-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358",
            'invalid device "MIG-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358": MIG devices cannot be '
            "chosen on their own; name their GPU (a GPU's MIG devices follow it)",
        ),
        (
            "0:1",
            'invalid device "0:1": MIG devices cannot be chosen on their own; name their GPU '
            "(a GPU's MIG devices follow it)",
        ),
        (
            "07:00.0",
            'invalid device "07:00.0": a PCI bus ID needs its domain, as lspci -D prints it '
            "(0000:07:00.0)",
        ),
        (
            True,
            "invalid device true: expected a GPU index, a GPU UUID (GPU-...) or a PCI bus ID "
            "(0000:07:00.0)",
        ),
        (
            420.0,
            "invalid device 420.0: expected a GPU index, a GPU UUID (GPU-...) or a PCI bus ID "
            '(0000:07:00.0); in YAML, quote a PCI bus ID ("0000:07:00.0"), which is otherwise '
            "read as a number",
        ),
    ],
)
def test_an_entry_that_names_no_gpu_is_refused_with_its_problem(item: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid device ") as caught:
        parse_entry(item)
    assert str(caught.value) == problem


def test_canonical_bus_id_reads_both_forms_and_refuses_anything_else() -> None:
    assert canonical_bus_id("00000000:0F:00.0") == canonical_bus_id("0000:0f:00.0")
    assert canonical_bus_id("0000:0f:00.0") == "0000:0f:00.0"
    assert canonical_bus_id("0f:00.0") is None
    assert canonical_bus_id("GPU-x") is None


def test_a_bus_id_entry_matches_the_gpu_whatever_form_nvml_reports() -> None:
    ref = parse_entry("0000:0f:00.0")
    assert ref.matches(9, "GPU-x", "00000000:0F:00.0")
    assert ref.matches(9, "GPU-x", "0000:0f:00.0")
    assert not ref.matches(9, "GPU-x", "00000000:07:00.0")


def test_a_uuid_entry_matches_regardless_of_case() -> None:
    assert parse_entry(UUID.upper()).matches(0, UUID, "00000000:07:00.0")
    assert not parse_entry(UUID).matches(0, UUID.replace("a0", "b0"), "00000000:07:00.0")


# -- through the loader: every source, one line each -----------------------------------


def test_command_line_list_is_split_trimmed_deduplicated_and_canonical() -> None:
    config = load_config(["--exclude-devices", f" 3 ,{UUID.upper()}, 00000000:0F:00.0,3,,"], {})
    assert config.flags.exclude_devices == ("3", UUID, "0000:0f:00.0")
    assert config.flags.include_devices == ()


def test_repeated_flag_appends() -> None:
    config = load_config(["--include-devices", "0", "--include-devices", "1"], {})
    assert config.flags.include_devices == ("0", "1")


def test_empty_variable_means_no_gpu_named() -> None:
    config = load_config([], {"INCLUDE_DEVICES": "", "EXCLUDE_DEVICES": " "})
    assert config.flags.include_devices == ()
    assert config.flags.exclude_devices == ()
    assert selector_of(config).selects_all


def test_file_takes_a_yaml_list_or_a_comma_string(write_config: Callable[[str], str]) -> None:
    path = write_config(
        "version: v1\n"
        "flags:\n"
        "  plugin:\n"
        f'    includeDevices: [0, "{UUID}", "0000:07:00.0", 0000:3b:00.0]\n'
        '    excludeDevices: "4, 5"\n'
    )
    config = load_config(["--config-file", path], {})
    assert config.flags.include_devices == ("0", UUID, "0000:07:00.0", "0000:3b:00.0")
    assert config.flags.exclude_devices == ("4", "5")
    assert config.sources["include_devices"] == "file"


@pytest.mark.parametrize(
    ("argv", "env", "line"),
    [
        (
            ["--include-devices", "-1"],
            {},
            'command line: --include-devices: invalid device "-1": a GPU index cannot be negative',
        ),
        (
            [],
            {"EXCLUDE_DEVICES": "0,bogus"},
            'environment: EXCLUDE_DEVICES: invalid device "bogus": expected a GPU index, a GPU '
            "UUID (GPU-...) or a PCI bus ID (0000:07:00.0)",
        ),
        (
            ["--exclude-devices=MIG-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358"],
            {},
            "command line: --exclude-devices: invalid device "
            '"MIG-25ca7cb9-2888-5d6e-87e2-4fdfdbeef358": MIG devices cannot be chosen on their '
            "own; name their GPU (a GPU's MIG devices follow it)",
        ),
    ],
)
def test_bad_flag_or_variable_is_one_line_naming_it(
    argv: list[str], env: dict[str, str], line: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(argv, env)
    assert caught.value.lines() == [line]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("[true]", "flags.plugin.excludeDevices: invalid device true: expected a GPU index"),
        ("{a: 1}", 'flags.plugin.excludeDevices: expected a list of GPU indexes, UUIDs or PCI bus '
         'IDs; found {"a": 1}'),
        ("[0000:07:00.0]", "flags.plugin.excludeDevices: invalid device 420.0: expected a GPU "
         "index"),
        ("'-3'", 'flags.plugin.excludeDevices: invalid device "-3": a GPU index cannot be '
         "negative"),
    ],
)  # fmt: skip
def test_bad_file_value_is_one_line_naming_the_key(
    value: str, problem: str, write_config: Callable[[str], str]
) -> None:
    path = write_config(f"version: v1\nflags:\n  plugin:\n    excludeDevices: {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(["--config-file", path], {})
    (line,) = caught.value.lines()
    assert line.startswith(f"{path}: {problem}")


def test_the_flag_wins_over_a_bad_file_value(write_config: Callable[[str], str]) -> None:
    path = write_config("version: v1\nflags:\n  plugin:\n    excludeDevices: [bogus]\n")
    config = load_config(["--config-file", path, "--exclude-devices", "1"], {})
    assert config.flags.exclude_devices == ("1",)


def test_selector_names_where_each_list_came_from(write_config: Callable[[str], str]) -> None:
    path = write_config("version: v1\nflags:\n  plugin:\n    includeDevices: [0]\n")
    from_file = selector_of(load_config(["--config-file", path], {}))
    assert from_file.include_origin == f"{path}: flags.plugin.includeDevices"
    assert from_file.exclude_origin == "--exclude-devices"
    from_env = selector_of(load_config([], {"EXCLUDE_DEVICES": "2"}))
    assert from_env.exclude_origin == "environment: EXCLUDE_DEVICES"
    from_flag = selector_of(load_config(["--exclude-devices", "2"], {}))
    assert from_flag.exclude_origin == "command line: --exclude-devices"
    assert from_flag.exclude == (GpuRef(RefKind.INDEX, "2"),)


def test_config_values_and_digest_carry_the_canonical_entries() -> None:
    one = load_config(["--exclude-devices", "0000:07:00.0"], {})
    other = load_config([], {"EXCLUDE_DEVICES": "00000000:07:00.0"})
    assert one.values()["flags"]["exclude_devices"] == ["0000:07:00.0"]  # type: ignore[index]
    assert one.digest == other.digest  # the same GPU written two ways is the same config
    assert load_config([], {}).digest != one.digest


def test_selector_of_plain_lists_parses_them() -> None:
    selector = GpuSelector.of(["1"], ["GPU-a0bba3c3-c007-582d-8278-aefa736de776"])
    assert selector.include == (GpuRef(RefKind.INDEX, "1"),)
    assert not selector.selects_all


def test_the_shipped_example_excludes_by_index_and_bus_id() -> None:
    example = Path(__file__).resolve().parents[3] / "config" / "exclude-devices.yaml"
    config = load_config([], {"CONFIG_FILE": str(example)})
    assert config.warnings == ()
    assert config.flags.exclude_devices == ("7", "0000:07:00.0")
    assert config.flags.include_devices == ()
