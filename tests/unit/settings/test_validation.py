"""Every invalid input gives exactly its one-line message, as a ConfigError.

``{file}`` in a case stands for the config file's path. The command line
given each of these inputs exits 1 printing only that line
(`tests/e2e/settings/test_validation.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from settings import ConfigError, load_config

RFC1123 = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


@dataclass(frozen=True)
class Case:
    id: str
    text: str | None  # config file content; None: no file
    message: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


def _ts(entry: str) -> str:
    return f"version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - {entry}\n"


MPS = (
    "version: v1\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"
)

CASES = [
    Case("unknown-version", "version: v2\n", "{file}: version: unknown version: v2"),
    Case("numeric-version", "version: 1\n", "{file}: version: unknown version: 1"),
    Case("mig-strategy", "flags:\n  migStrategy: bogus\n",
         "{file}: flags.migStrategy: unknown MIG strategy: bogus"),
    Case("mig-strategy-flag", None, "command line: --mig-strategy: unknown MIG strategy: bogus",
         argv=("--mig-strategy=bogus",)),
    Case("mig-strategy-env", None, "environment: MIG_STRATEGY: unknown MIG strategy: bogus",
         env={"MIG_STRATEGY": "bogus"}),
    Case("device-list-strategy", "flags:\n  plugin:\n    deviceListStrategy: [envvar, nope]\n",
         "{file}: flags.plugin.deviceListStrategy: "
         "invalid --device-list-strategy option: invalid strategy: nope"),
    Case("device-list-empty-item", None,
         "environment: DEVICE_LIST_STRATEGY: "
         "invalid --device-list-strategy option: invalid strategy: ",
         env={"DEVICE_LIST_STRATEGY": "envvar,"}),
    Case("device-list-type", "flags:\n  plugin:\n    deviceListStrategy: {a: 1}\n",
         '{file}: flags.plugin.deviceListStrategy: invalid deviceListStrategy: {"a": 1}'),
    Case("device-id-strategy", "flags:\n  plugin:\n    deviceIDStrategy: serial\n",
         "{file}: flags.plugin.deviceIDStrategy: invalid --device-id-strategy option: serial"),
    Case("allocation-policy", "flags:\n  plugin:\n    sharedDevicesAllocationPolicy: random\n",
         "{file}: flags.plugin.sharedDevicesAllocationPolicy: "
         "invalid --shared-devices-allocation-policy option: random"),
    Case("discovery-strategy", "flags:\n  deviceDiscoveryStrategy: vfio\n",
         "{file}: flags.deviceDiscoveryStrategy: invalid --device-discovery-strategy option: vfio"),
    Case("replicas-one", _ts("name: nvidia.com/gpu\n      replicas: 1"),
         "{file}: sharing.timeSlicing.resources[0].replicas: "
         "number of replicas must be >= 2; found 1"),
    Case("replicas-negative", _ts("name: nvidia.com/gpu\n      replicas: -3"),
         "{file}: sharing.timeSlicing.resources[0].replicas: "
         "number of replicas must be >= 2; found -3"),
    Case("replicas-text", _ts('name: nvidia.com/gpu\n      replicas: "ten"'),
         "{file}: sharing.timeSlicing.resources[0].replicas: "
         'number of replicas must be an integer; found "ten"'),
    Case("replicas-fraction", _ts("name: nvidia.com/gpu\n      replicas: 2.5"),
         "{file}: sharing.timeSlicing.resources[0].replicas: "
         "number of replicas must be an integer; found 2.5"),
    Case("replicas-missing", _ts("name: nvidia.com/gpu"),
         "{file}: sharing.timeSlicing.resources[0].replicas: no replicas specified"),
    Case("replicas-wrong-case", _ts("name: nvidia.com/gpu\n      Replicas: 4"),
         "{file}: sharing.timeSlicing.resources[0].replicas: no replicas specified "
         "(found 'Replicas'; keys here are case-sensitive)"),
    Case("name-missing", _ts("replicas: 4"),
         "{file}: sharing.timeSlicing.resources[0].name: no resource name specified"),
    Case("name-invalid", _ts("name: GPU_Big\n      replicas: 4"),
         f"{{file}}: sharing.timeSlicing.resources[0].name: "
         f"incorrect format for resource name 'nvidia.com/GPU_Big': {RFC1123}"),
    Case("name-too-long", _ts(f"name: {'g' * 60}\n      replicas: 4"),
         "{file}: sharing.timeSlicing.resources[0].name: fully-qualified resource name must be "
         f"63 characters or less: nvidia.com/{'g' * 60}"),
    Case("no-resources", "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
         "{file}: sharing.timeSlicing.resources: no resources specified"),
    Case("empty-time-slicing", "sharing:\n  timeSlicing:\n",
         "{file}: sharing.timeSlicing.resources: no resources specified"),
    Case("both-strategies",
         "sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
         "  mps:\n    resources: [{name: gpu, replicas: 2}]\n",
         "{file}: sharing: timeSlicing and mps are mutually exclusive; configure only one of them"),
    Case("mps-mixed", MPS,
         "{file}: sharing.mps: using --mig-strategy=mixed is not supported with MPS",
         argv=("--mig-strategy=mixed", "--mps-root=/run/nvidia/mps")),
    Case("mps-without-root", MPS,
         "{file}: sharing.mps: using MPS requires --mps-root to be specified"),
    Case("imex-channels-file", "imex:\n  channelIDs: [1, 2]\n",
         "{file}: imex.channelIDs: invalid IMEX channel IDs: invalid IMEX config: "
         "channelIDs must be [] or [0]; found [1 2]"),
    Case("imex-channels-flag", None,
         "command line: --imex-channel-ids: invalid IMEX channel IDs: invalid IMEX config: "
         "channelIDs must be [] or [0]; found [0 1]", argv=("--imex-channel-ids=0,1",)),
    Case("imex-channels-type", "imex:\n  channelIDs: zero\n",
         '{file}: imex.channelIDs: expected a list of integers; found "zero"'),
    Case("devices-string", _ts("name: gpu\n      replicas: 2\n      devices: some"),
         "{file}: sharing.timeSlicing.resources[0].devices: "
         "devices set as 'some' but the only valid string input is 'all'"),
    Case("devices-zero", _ts("name: gpu\n      replicas: 2\n      devices: 0"),
         "{file}: sharing.timeSlicing.resources[0].devices: "
         "devices set as '0' but a count of devices must be > 0"),
    Case("devices-list-item", _ts("name: gpu\n      replicas: 2\n      devices: [0, gpu0]"),
         "{file}: sharing.timeSlicing.resources[0].devices: unsupported type for device in "
         "devices list: \"gpu0\" (expected a GPU index, a 'gpu:mig' index, a GPU UUID "
         "or a MIG UUID)"),
    Case("devices-type", _ts("name: gpu\n      replicas: 2\n      devices: true"),
         "{file}: sharing.timeSlicing.resources[0].devices: "
         "unrecognized type for devices spec: true"),
    Case("rename-invalid", _ts("name: gpu\n      replicas: 2\n      rename: Shared!"),
         "{file}: sharing.timeSlicing.resources[0].rename: "
         f"incorrect format for resource name 'nvidia.com/Shared!': {RFC1123}"),
    Case("fail-on-init-error-type", "flags:\n  failOnInitError: maybe\n",
         '{file}: flags.failOnInitError: expected a boolean (true or false); found "maybe"'),
    Case("fail-on-init-error-string", 'flags:\n  failOnInitError: "true"\n',
         '{file}: flags.failOnInitError: expected a boolean (true or false); found "true"'),
    Case("mig-strategy-type", "flags:\n  migStrategy: no\n",
         "{file}: flags.migStrategy: expected a string; found false"),
    Case("flags-not-mapping", "flags: [migStrategy]\n",
         '{file}: flags: expected a mapping; found ["migStrategy"]'),
    Case("top-level-list", "- a\n- b\n",
         '{file}: expected a mapping at the top level; found ["a", "b"]'),
    Case("resources-pattern", "resources:\n  gpus:\n  - name: gpu\n",
         "{file}: resources.gpus[0].pattern: resources must have a 'pattern' field set"),
    Case("resources-name", "resources:\n  mig:\n  - pattern: '1g.5gb'\n",
         "{file}: resources.mig[0].name: resources must have a 'name' field set"),
    Case("sleep-interval", "flags:\n  gfd:\n    sleepInterval: 60\n    oneshot: sometimes\n",
         '{file}: flags.gfd.oneshot: expected a boolean (true or false); found "sometimes"'),
    Case("sleep-interval-unit", "flags:\n  gfd:\n    sleepInterval: '60'\n",
         '{file}: flags.gfd.sleepInterval: time: missing unit in duration "60"'),
    Case("yaml-syntax", "flags: {migStrategy: none\n",
         "{file}: invalid YAML at line 2, column 1: expected ',' or '}', but got '<stream end>'"),
    Case("bool-env", None,
         'environment: FAIL_ON_INIT_ERROR: could not parse "maybe" as bool value '
         "for flag fail-on-init-error", env={"FAIL_ON_INIT_ERROR": "maybe"}),
    Case("bool-flag", None,
         'command line: --pass-device-specs: could not parse "yes" as bool value',
         argv=("--pass-device-specs=yes",)),
    Case("two-forms", None,
         "command line: --driver-root: Cannot use two forms of the same flag: "
         "driver-root nvidia-driver-root",
         argv=("--driver-root=/a", "--nvidia-driver-root=/b")),
    Case("unknown-flag", None, "command line: --no-such-flag: flag provided but not defined",
         argv=("--no-such-flag=1",)),
    Case("positional", None, "command line: unexpected argument 'extra'", argv=("extra",)),
    Case("imex-flag-not-int", None,
         'command line: --imex-channel-ids: invalid integer "x"', argv=("--imex-channel-ids=x",)),
    Case("fallback", None, "environment: FALLBACK_STRATEGIES: unknown fallback strategy: first",
         env={"FALLBACK_STRATEGIES": "named,first"}),
    Case("fallback-empty-env", None,
         "environment: FALLBACK_STRATEGIES: unknown fallback strategy: ",
         env={"FALLBACK_STRATEGIES": ""}),
    Case("log-format", None,
         "command line: --log-format: invalid log format: yaml (expected json or text)",
         argv=("--log-format=yaml",)),
    Case("state-address", None,
         'environment: STATE_ADDRESS: invalid address "9040": expected HOST:PORT',
         env={"STATE_ADDRESS": "9040"}),
    Case("quiet-period", None,
         'command line: --health-quiet-period: invalid number of seconds "-5": must be >= 0',
         argv=("--health-quiet-period=-5",)),
    Case("node-label-empty", None,
         "environment: NODE_LABEL: invalid <node-label>: must not be empty string",
         env={"NODE_LABEL": ""}),
    Case("missing-file", None,
         "{file}: error opening config file: No such file or directory",
         argv=("--config-file={file}",)),
    Case("multiline-value", 'flags:\n  migStrategy: "a\\nb"\n',
         "{file}: flags.migStrategy: unknown MIG strategy: a\\nb"),
]  # fmt: skip


def case_inputs(case: Case, tmp_path: Path) -> tuple[list[str], dict[str, str], str]:
    path = str(tmp_path / "config.yaml")
    env = {name: value.replace("{file}", path) for name, value in case.env.items()}
    argv = [arg.replace("{file}", path) for arg in case.argv]
    if case.text is not None:
        Path(path).write_text(case.text, encoding="utf-8")
        env.setdefault("CONFIG_FILE", path)
    return argv, env, path


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
def test_exact_message(case: Case, tmp_path: Path) -> None:
    argv, env, path = case_inputs(case, tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(argv, env)
    message = str(caught.value)
    assert message == case.message.replace("{file}", path)
    assert len(message.splitlines()) == 1


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("env", "text", "expected"),
    [
        pytest.param({}, "version: v2\n", True, id="default"),
        pytest.param({"FAIL_ON_INIT_ERROR": "false"}, "version: v2\n", False, id="env"),
        pytest.param({"FAIL_ON_INIT_ERROR": ""}, "version: v2\n", False, id="empty-env"),
        pytest.param({}, "flags: {failOnInitError: false, migStrategy: x}\n", False, id="file"),
        pytest.param({"MIG_STRATEGY": "x", "FAIL_ON_INIT_ERROR": "0"}, None, False, id="no-file"),
        pytest.param(
            {},
            "flags: {FailOnInitError: false}\nsharing: {timeSlicing: {}}\n",
            False,
            id="rejected-file",
        ),
        pytest.param(
            {"FAIL_ON_INIT_ERROR": "true"},
            "flags: {failOnInitError: false}\nversion: 2\n",
            True,
            id="env-over-rejected-file",
        ),
    ],
)
def test_error_carries_fail_on_init_error(
    env: dict[str, str], text: str | None, expected: bool, write_config: Callable[[str], str]
) -> None:
    if text is not None:
        env = {**env, "CONFIG_FILE": write_config(text)}
    with pytest.raises(ConfigError) as caught:
        load_config([], env)
    assert caught.value.fail_on_init_error is expected


def test_error_is_permanent_and_says_where() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(["--mig-strategy=x"], {})
    assert caught.value.permanent
    assert caught.value.origin == "command line"
    assert caught.value.path == "--mig-strategy"
    assert caught.value.problem == "unknown MIG strategy: x"


def test_a_directory_at_the_config_path_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config([], {}, config_file=str(tmp_path))
    assert str(caught.value) == f"{tmp_path}: error opening config file: Is a directory"


def test_a_file_that_is_not_text_is_one_yaml_line(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00\x00garbage\x00")
    with pytest.raises(ConfigError) as caught:
        load_config([], {}, config_file=str(path))
    assert str(caught.value).startswith(f"{path}: invalid YAML")
    assert len(str(caught.value).splitlines()) == 1
