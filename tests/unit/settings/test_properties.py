"""Whatever the input, the loader returns a config or raises ConfigError.

Arbitrary YAML documents, arbitrary text, and random mutations of the
shipped examples are written to a file and loaded; arbitrary arguments and
environment values are loaded too. Any other exception escaping, or an error
text that is not one line, is a bug.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from settings import ConfigError, EffectiveConfig, HelpRequested, load_config
from settings.flags import FLAGS

CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"
EXAMPLES = [yaml.safe_load(path.read_text()) for path in sorted(CONFIG_DIR.glob("*.yaml"))]

# Keys the schema knows, so generated documents reach past the top level.
KNOWN_KEYS = [
    "version", "flags", "plugin", "gfd", "sharing", "timeSlicing", "mps", "resources",
    "imex", "channelIDs", "required", "name", "replicas", "rename", "devices", "pattern",
    "gpus", "mig", "renameByDefault", "failRequestsGreaterThanOne", "migStrategy",
    "failOnInitError", "deviceListStrategy", "deviceIDStrategy", "sleepInterval", "mpsRoot",
    "nvidiaDevRoot", "oneshot", "MIGSTRATEGY", "Replicas", "distinctDevices",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["v1", "all", "none", "mixed", "envvar", "gpu", "nvidia.com/gpu", "0", "1m"]),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12))
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=25,
)

settings_profile = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prop") / "config.yaml"


def _outcome(
    argv: list[str], env: dict[str, str], config_file: str | None = None
) -> EffectiveConfig | ConfigError | HelpRequested:
    """What loading gave; any other exception propagates and fails the test."""
    try:
        return load_config(argv, env, config_file=config_file)
    except (ConfigError, HelpRequested) as error:
        return error


def _check(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    outcome = _outcome([], {"MPS_ROOT": "/run/mps"}, str(path))
    if isinstance(outcome, EffectiveConfig):
        assert len(outcome.digest) == 64
        assert all(len(warning.splitlines()) == 1 for warning in outcome.warnings)
    else:
        assert isinstance(outcome, ConfigError)
        assert str(outcome)
        assert len(str(outcome).splitlines()) == 1, str(outcome)


@settings_profile
@given(document=documents)
def test_any_yaml_document(config_path: Path, document: Any) -> None:
    _check(config_path, yaml.safe_dump(document, allow_unicode=True).encode())


@settings_profile
@given(text=st.text(max_size=200))
def test_any_text(config_path: Path, text: str) -> None:
    _check(config_path, text.encode("utf-8", errors="surrogatepass"))


@settings_profile
@given(data=st.binary(max_size=100))
def test_any_bytes(config_path: Path, data: bytes) -> None:
    _check(config_path, data)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


@st.composite
def mutated_examples(draw: st.DrawFn) -> Any:
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add", "recase"]))
        if not path:
            if action == "replace":
                document = draw(documents)
            continue
        parent = _get(document, path[:-1])
        last = path[-1]
        if action == "replace":
            parent[last] = draw(documents)
        elif action == "delete":
            del parent[last]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(documents)
        elif action == "add" and isinstance(parent, list):
            parent.insert(last, draw(documents))
        elif action == "recase" and isinstance(parent, dict) and isinstance(last, str):
            parent[draw(st.sampled_from([last.upper(), last.lower(), last.title()]))] = parent.pop(
                last
            )
    return document


@settings_profile
@given(document=mutated_examples())
def test_mutated_examples(config_path: Path, document: Any) -> None:
    _check(config_path, yaml.safe_dump(document, allow_unicode=True).encode())


flag_names = st.sampled_from([f"--{name}" for spec in FLAGS for name in spec.names])
arguments = st.lists(
    st.one_of(
        st.text(max_size=10),
        st.builds(lambda flag, value: f"{flag}={value}", flag_names, st.text(max_size=10)),
        flag_names,
    ),
    max_size=5,
)
environments = st.dictionaries(
    st.sampled_from([name for spec in FLAGS for name in spec.env if name != "CONFIG_FILE"]),
    st.one_of(st.text(max_size=10), st.sampled_from(["", "true", "0", "envvar,", "0x0"])),
    max_size=5,
)


@settings_profile
@given(argv=arguments, env=environments)
def test_any_arguments_and_environment(argv: list[str], env: dict[str, str]) -> None:
    outcome = _outcome(argv, env)
    if isinstance(outcome, HelpRequested):
        assert "--mig-strategy" in outcome.text
    elif isinstance(outcome, ConfigError):
        assert len(str(outcome).splitlines()) == 1, str(outcome)
    else:
        assert isinstance(outcome, EffectiveConfig)
